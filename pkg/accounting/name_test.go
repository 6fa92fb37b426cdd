package accounting

import (
	"errors"
	"maps"
	"testing"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

const (
	gpuA = "GPU-5f0c8a52-3b1e-4d7a-9c41-0a1b2c3d4e5f"
	gpuB = "GPU-9e8d7c6b-5a49-4382-b716-f5e4d3c2b1a0"
)

// env builds /proc/<pid>/environ contents: NUL after every entry, as the
// kernel shows them.
func env(entries ...string) []byte {
	var b []byte
	for _, e := range entries {
		b = append(b, e...)
		b = append(b, 0)
	}
	return b
}

func TestParseEnviron(t *testing.T) {
	for _, tc := range []struct {
		name    string
		environ []byte
		want    string
		err     error
	}{
		{"among others", env("PATH=/usr/bin", EnvVar+"="+gpuA+"::1", "HOME=/root"), gpuA + "::1", nil},
		{"first entry", env(EnvVar+"="+gpuB+"::12", "X=1"), gpuB + "::12", nil},
		{"last entry without a trailing NUL", append(env("A=1"), EnvVar+"="+gpuA+"::0"...), gpuA + "::0", nil},
		{"missing", env("PATH=/usr/bin", "CUDA_MPS_PIPE_DIRECTORY=/run/mps"), "", ErrNoDevice},
		{"empty environ (kernel thread, zombie)", nil, "", ErrNoDevice},
		{"only a prefix of the name", env(EnvVar+"_X="+gpuA+"::0", "X"+EnvVar+"="+gpuA+"::0"), "", ErrNoDevice},
		{"garbage entries are skipped", env("\xff\xfe", "=", "noequals", EnvVar+"="+gpuA+"::3"), gpuA + "::3", nil},
		{"set twice, same value", env(EnvVar+"="+gpuA+"::3", EnvVar+"="+gpuA+"::3"), gpuA + "::3", nil},
		{"set twice, different values", env(EnvVar+"="+gpuA+"::3", EnvVar+"="+gpuA+"::0"), "", ErrBadDevice},
		{"empty value is no device", env(EnvVar + "="), "", ErrNoDevice},
		{"no index", env(EnvVar + "=" + gpuA), "", ErrBadDevice},
		{"one colon", env(EnvVar + "=" + gpuA + ":1"), "", ErrBadDevice},
		{"negative index", env(EnvVar + "=" + gpuA + "::-1"), "", ErrBadDevice},
		{"index with a sign", env(EnvVar + "=" + gpuA + "::+1"), "", ErrBadDevice},
		{"index with leading zero", env(EnvVar + "=" + gpuA + "::01"), "", ErrBadDevice},
		{"no UUID", env(EnvVar + "=::1"), "", ErrBadDevice},
		{"two device names", env(EnvVar + "=" + gpuA + "::1," + gpuB + "::1"), "", ErrBadDevice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseEnviron(tc.environ)
			if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
				t.Fatalf("ParseEnviron = %q, %v; want error %v", got, err, tc.err)
			}
			if got != tc.want {
				t.Errorf("ParseEnviron = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDeviceNameRoundTrip(t *testing.T) {
	name := DeviceName(gpuA, 7)
	if name != gpuA+"::7" {
		t.Fatalf("DeviceName = %q", name)
	}
	uuid, i, err := ParseDeviceName(name)
	if err != nil || uuid != gpuA || i != 7 {
		t.Errorf("ParseDeviceName(%q) = %q, %d, %v", name, uuid, i, err)
	}
}

func TestCaps(t *testing.T) {
	g := gpu.Info{UUID: gpuA, MemoryTotalBytes: 143771 << 20}
	got := Caps(vdev.Split(g, 8))
	want := map[string]uint64{}
	for i := range 8 {
		want[DeviceName(gpuA, i)] = 17971 << 20 // 143771 / 8 MiB, as MPS enforces per client
	}
	if !maps.Equal(got, want) {
		t.Errorf("Caps = %v, want %v", got, want)
	}
}
