package accounting

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"yunion.io/x/mps-daemon/pkg/vdev"
)

// EnvVar names the virtual device a container was given. The CDI spec sets
// it in every container; accounting reads it back from /proc/<pid>/environ.
const EnvVar = "YUNION_MPS_VIRTUAL_DEVICE"

// ErrNoDevice: the process names no virtual device.
var ErrNoDevice = errors.New("names no virtual device")

// ErrBadDevice: the process names a device in a form that is not
// <GPU UUID>::<i>, or names it twice with different values.
var ErrBadDevice = errors.New("names a virtual device in a malformed way")

// DeviceName is a virtual device's stable name: its GPU's UUID, two colons,
// the slice index as in its addr ("GPU-5f0...::3").
func DeviceName(gpuUUID string, index int) string {
	return gpuUUID + "::" + strconv.Itoa(index)
}

// ParseDeviceName splits a device name into its GPU UUID and index.
func ParseDeviceName(name string) (gpuUUID string, index int, err error) {
	uuid, idx, ok := strings.Cut(name, "::")
	if !ok || uuid == "" || strings.ContainsAny(uuid, ": \t\n") {
		return "", 0, fmt.Errorf("%q: want <GPU UUID>::<index>: %w", name, ErrBadDevice)
	}
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 || strconv.Itoa(i) != idx {
		return "", 0, fmt.Errorf("%q: index %q is not a slice number: %w", name, idx, ErrBadDevice)
	}
	return uuid, i, nil
}

// ParseEnviron finds EnvVar in the contents of /proc/<pid>/environ:
// NUL-separated NAME=value entries. ErrNoDevice when it is absent or empty;
// entries that are not NAME=value are skipped. execve accepts the same name twice and
// getenv returns the first, but a program may read either: two different
// values are ErrBadDevice rather than a guess.
func ParseEnviron(environ []byte) (device string, err error) {
	found := false
	for entry := range bytes.SplitSeq(environ, []byte{0}) {
		name, value, ok := bytes.Cut(entry, []byte{'='})
		if !ok || string(name) != EnvVar {
			continue
		}
		if found && string(value) != device {
			return "", fmt.Errorf("%s is set twice (%q and %q): %w", EnvVar, device, value, ErrBadDevice)
		}
		device, found = string(value), true
	}
	if !found || device == "" {
		return "", ErrNoDevice
	}
	if _, _, err := ParseDeviceName(device); err != nil {
		return "", fmt.Errorf("%s: %w", EnvVar, err)
	}
	return device, nil
}

// CapBytes is a virtual device's memory cap in bytes: the same MiB figure
// MPS enforces per client, here for the whole device.
func CapBytes(d vdev.Device) uint64 {
	if d.MemoryLimitMiB <= 0 {
		return 0
	}
	return uint64(d.MemoryLimitMiB) << 20
}

// Caps maps the names of devs to their caps, the form Account and Decide
// take: the keys are also the devices Account reports.
func Caps(devs []vdev.Device) map[string]uint64 {
	out := make(map[string]uint64, len(devs))
	for _, d := range devs {
		out[DeviceName(d.GPU.UUID, d.Index)] = CapBytes(d)
	}
	return out
}
