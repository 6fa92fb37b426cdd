package accounting

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/vdev"
)

// repeat is an endless stream of one byte, for environments larger than
// anything a test should hold in memory.
type repeat byte

func (r repeat) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

func TestScanEnviron(t *testing.T) {
	dev := gpuA + "::3"
	long := strings.Repeat("7", 200<<10) // longer than the reader's buffer
	for _, tc := range []struct {
		name   string
		in     io.Reader
		device []string
		thread []string
		err    error
	}{
		{"plain", bytes.NewReader(env("A=1", vdev.EnvVar+"="+dev, vdev.EnvThreadPercentage+"=13")), []string{dev}, []string{"13"}, nil},
		{"no final NUL", strings.NewReader("A=1\x00" + vdev.EnvThreadPercentage + "=13"), nil, []string{"13"}, nil},
		{"after entries longer than the buffer", bytes.NewReader(env("PAD="+long, "NOEQUALS"+long, vdev.EnvVar+"="+dev)), []string{dev}, nil, nil},
		{"a wanted value longer than the buffer: cut, marked with its length", bytes.NewReader(env(vdev.EnvThreadPercentage + "=" + long)),
			nil, []string{strings.Repeat("7", maxEnvValue) + "... (204800 bytes)"}, nil},
		{"same value twice is one", bytes.NewReader(env(vdev.EnvVar+"="+dev, vdev.EnvVar+"="+dev)), []string{dev}, nil, nil},
		{"two values kept, a third ignored", bytes.NewReader(env(vdev.EnvThreadPercentage+"=1", vdev.EnvThreadPercentage+"=2", vdev.EnvThreadPercentage+"=3")),
			nil, []string{"1", "2"}, nil},
		{"a name that only starts like one", bytes.NewReader(env(vdev.EnvVar + "X=" + dev)), nil, nil, nil},
		{"empty", strings.NewReader(""), nil, nil, nil},
		{"past what execve can make", io.MultiReader(strings.NewReader(vdev.EnvVar+"="+dev+"\x00"), io.LimitReader(repeat('x'), maxEnvironRead+10)), nil, nil, errEnvironTooLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := scanEnviron(tc.in)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(v.device, tc.device) || !slices.Equal(v.thread, tc.thread) {
				t.Errorf("got %q %q, %v; want %q %q", v.device, v.thread, err, tc.device, tc.thread)
			}
		})
	}
}
