package agent

import (
	"fmt"
	"testing"

	"yunion.io/x/mps-daemon/pkg/gpu"
)

// TestRememberModesKeepsTheFirstReading: several GPUs remembered at once
// (a start's preparations) add the modes not yet recorded and keep the
// recorded ones, as one GPU at a time does.
func TestRememberModesKeepsTheFirstReading(t *testing.T) {
	s := &stateDir{path: t.TempDir()}
	a, b, c := gpu.UUID("GPU-a"), gpu.UUID("GPU-b"), gpu.UUID("GPU-c")
	if err := s.rememberMode(a, gpu.ComputeModeProhibited); err != nil {
		t.Fatal(err)
	}
	if err := s.rememberModes(map[gpu.UUID]gpu.ComputeMode{a: gpu.ComputeModeDefault, b: gpu.ComputeModeDefault, c: gpu.ComputeModeProhibited}); err != nil {
		t.Fatal(err)
	}
	if err := s.rememberMode(b, gpu.ComputeModeProhibited); err != nil {
		t.Fatal(err)
	}
	got, err := s.previousModes()
	if err != nil {
		t.Fatal(err)
	}
	want := map[gpu.UUID]string{a: "Prohibited", b: "Default", c: "Prohibited"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("remembered %v, want %v", got, want)
	}
}
