package accounting

import (
	"errors"
	"maps"
	"testing"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/units"
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
		{"among others", env("PATH=/usr/bin", vdev.EnvVar+"="+gpuA+"::1", "HOME=/root"), gpuA + "::1", nil},
		{"first entry", env(vdev.EnvVar+"="+gpuB+"::12", "X=1"), gpuB + "::12", nil},
		{"last entry without a trailing NUL", append(env("A=1"), vdev.EnvVar+"="+gpuA+"::0"...), gpuA + "::0", nil},
		{"missing", env("PATH=/usr/bin", "CUDA_MPS_PIPE_DIRECTORY=/run/mps"), "", ErrNoDevice},
		{"empty environ (kernel thread, zombie)", nil, "", ErrNoDevice},
		{"only a prefix of the name", env(vdev.EnvVar+"_X="+gpuA+"::0", "X"+vdev.EnvVar+"="+gpuA+"::0"), "", ErrNoDevice},
		{"garbage entries are skipped", env("\xff\xfe", "=", "noequals", vdev.EnvVar+"="+gpuA+"::3"), gpuA + "::3", nil},
		{"set twice, same value", env(vdev.EnvVar+"="+gpuA+"::3", vdev.EnvVar+"="+gpuA+"::3"), gpuA + "::3", nil},
		{"set twice, different values", env(vdev.EnvVar+"="+gpuA+"::3", vdev.EnvVar+"="+gpuA+"::0"), "", vdev.ErrBadName},
		{"empty value is no device", env(vdev.EnvVar + "="), "", ErrNoDevice},
		{"no index", env(vdev.EnvVar + "=" + gpuA), "", vdev.ErrBadName},
		{"one colon", env(vdev.EnvVar + "=" + gpuA + ":1"), "", vdev.ErrBadName},
		{"negative index", env(vdev.EnvVar + "=" + gpuA + "::-1"), "", vdev.ErrBadName},
		{"index with a sign", env(vdev.EnvVar + "=" + gpuA + "::+1"), "", vdev.ErrBadName},
		{"index with leading zero", env(vdev.EnvVar + "=" + gpuA + "::01"), "", vdev.ErrBadName},
		{"no UUID", env(vdev.EnvVar + "=::1"), "", vdev.ErrBadName},
		{"two device names", env(vdev.EnvVar + "=" + gpuA + "::1," + gpuB + "::1"), "", vdev.ErrBadName},
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

func TestCaps(t *testing.T) {
	const h200 units.MiB = 143771 // an H200's memory.total
	g := gpu.Info{UUID: gpuA, MemoryTotal: h200.Bytes()}
	got := Caps(vdev.Split(g, 8, 12, vdev.QoS{}))
	want := map[string]uint64{}
	for i := range 8 {
		want[vdev.NameOf(gpuA, i).String()] = uint64((h200 / 8).Bytes()) // as MPS enforces it per client
	}
	if !maps.Equal(got, want) {
		t.Errorf("Caps = %v, want %v", got, want)
	}
}
