package vdev

import (
	"errors"
	"testing"

	"yunion.io/x/mps-daemon/pkg/gpu"
)

const gpuA = "GPU-4baeae3a-899f-8852-bd11-2e4ce3171eb0"

func TestNameRoundTrip(t *testing.T) {
	name := NameOf(gpuA, 7)
	if name != gpuA+"::7" {
		t.Fatalf("Name = %q", name)
	}
	if d := (Device{GPU: gpu.Info{UUID: gpuA}, Index: 7}); d.Name() != name {
		t.Errorf("Device.Name = %q, want %q", d.Name(), name)
	}
	uuid, i, err := ParseName(name.String())
	if err != nil || uuid != gpuA || i != 7 {
		t.Errorf("ParseName(%q) = %q, %d, %v", name, uuid, i, err)
	}
}

func TestParseName(t *testing.T) {
	tests := []struct {
		in    string
		uuid  string
		index int
		ok    bool
	}{
		{gpuA + "::3", gpuA, 3, true},
		{gpuA + "::0", gpuA, 0, true},
		{gpuA + "::12", gpuA, 12, true},
		{gpuA + "::-1", "", 0, false},
		{gpuA + "::+1", "", 0, false},
		{gpuA + "::03", "", 0, false},
		{gpuA + "::", "", 0, false},
		{gpuA + ":3", "", 0, false},
		{gpuA, "", 0, false},
		{"::1", "", 0, false},
		{gpuA + "::1," + gpuA + "::2", "", 0, false},
		{"GPU x::1", "", 0, false},
		{"", "", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			u, i, err := ParseName(tt.in)
			if u.String() != tt.uuid || i != tt.index || (err == nil) != tt.ok {
				t.Errorf("ParseName(%q) = %q, %d, %v; want %q, %d, ok %v", tt.in, u, i, err, tt.uuid, tt.index, tt.ok)
			}
			if !tt.ok && !errors.Is(err, ErrBadName) {
				t.Errorf("ParseName(%q) error %v does not wrap ErrBadName", tt.in, err)
			}
		})
	}
}
