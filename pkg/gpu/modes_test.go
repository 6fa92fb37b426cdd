package gpu

import (
	"fmt"
	"testing"
)

// TestRememberModesKeepsTheFirstReading: several GPUs remembered at once
// (a start's preparations) add the modes not yet recorded and keep the
// recorded ones, as one GPU at a time does.
func TestRememberModesKeepsTheFirstReading(t *testing.T) {
	s := NewModes(t.TempDir())
	a, b, c := UUID("GPU-a"), UUID("GPU-b"), UUID("GPU-c")
	if err := s.Remember(a, ComputeModeProhibited); err != nil {
		t.Fatal(err)
	}
	if err := s.RememberAll(map[UUID]ComputeMode{a: ComputeModeDefault, b: ComputeModeDefault, c: ComputeModeProhibited}); err != nil {
		t.Fatal(err)
	}
	if err := s.Remember(b, ComputeModeProhibited); err != nil {
		t.Fatal(err)
	}
	got, err := s.Previous()
	if err != nil {
		t.Fatal(err)
	}
	want := map[UUID]string{a: "Prohibited", b: "Default", c: "Prohibited"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("remembered %v, want %v", got, want)
	}
}
