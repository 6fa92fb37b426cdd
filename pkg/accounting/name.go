package accounting

import (
	"bytes"
	"errors"

	"yunion.io/x/mps-daemon/pkg/vdev"
)

// ErrNoDevice: the process names no virtual device.
var ErrNoDevice = errors.New("names no virtual device")

// ParseEnviron finds vdev.EnvVar in the contents of /proc/<pid>/environ:
// NUL-separated NAME=value entries. ErrNoDevice when it is absent or empty;
// entries that are not NAME=value are skipped. A value that is not a
// virtual device name is vdev.ErrBadName. execve accepts the same name
// twice and getenv returns the first, but a program may read either: two
// different values are vdev.ErrBadName too rather than a guess.
func ParseEnviron(environ []byte) (device string, err error) {
	v, err := scanEnviron(bytes.NewReader(environ))
	if err != nil {
		return "", err
	}
	return v.deviceOf()
}

// Caps maps the names of devs to their memory caps in bytes (the same
// limit MPS enforces per client, here for the whole device), the form
// Account and Decide take: the keys are also the devices Account reports.
func Caps(devs []vdev.Device) map[string]uint64 {
	out := make(map[string]uint64, len(devs))
	for _, d := range devs {
		out[d.Name().String()] = uint64(d.MemoryLimit.Bytes())
	}
	return out
}
