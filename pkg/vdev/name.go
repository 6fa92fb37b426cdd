package vdev

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"yunion.io/x/mps-daemon/pkg/gpu"
)

// EnvVar names the virtual device a container was given, "<GPU UUID>::<i>".
// The CDI spec sets it in every container, for the programs there. The
// accounting believes it only for processes outside containers
// (/proc/<pid>/environ); a container's processes are billed by the identity
// file the spec mounts (pkg/identity), which they cannot change.
const EnvVar = "YUNION_MPS_VIRTUAL_DEVICE"

// ErrBadName: a string that is not "<GPU UUID>::<i>".
var ErrBadName = errors.New("malformed virtual device name")

// Name is a virtual device's stable name: its GPU's UUID, two colons, the
// slice index as in its addr ("GPU-5f0...::3"). It is the CDI device name,
// the value of EnvVar, the content of its identity file and the key the
// agent and the accounting know the device by.
type Name string

// NameOf is the name of slice index of the GPU with this UUID.
func NameOf(gpuUUID gpu.UUID, index int) Name {
	return Name(string(gpuUUID) + "::" + strconv.Itoa(index))
}

// String is the name as it is written everywhere.
func (n Name) String() string { return string(n) }

// ParseName splits a name made by Name into its GPU UUID and index; anything
// else is an error wrapping ErrBadName. The UUID is only required to be
// non-empty and free of colons and white space: whether such a GPU exists
// is for the caller to decide.
func ParseName(name string) (gpuUUID gpu.UUID, index int, err error) {
	uuid, idx, ok := strings.Cut(name, "::")
	if !ok || uuid == "" || strings.ContainsAny(uuid, ": \t\n") {
		return "", 0, fmt.Errorf("%q: want <GPU UUID>::<index>: %w", name, ErrBadName)
	}
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 || strconv.Itoa(i) != idx {
		return "", 0, fmt.Errorf("%q: index %q is not a slice number: %w", name, idx, ErrBadName)
	}
	return gpu.UUID(uuid), i, nil
}
