//go:build cgo

package nvml

import (
	"os"
	"path/filepath"
	"testing"

	"yunion.io/x/mps-daemon/pkg/gpu"
)

// TestSimClientsFromAnotherProcess: what WriteSimMPSProcesses puts under a
// simulated host's root (a test driving `mps-daemon --simulate` does it
// from its own process) is what that host's NVML lists; a broken file is
// an NVML error, never an empty list.
func TestSimClientsFromAnotherProcess(t *testing.T) {
	root := t.TempDir()
	a, h, err := NewSimulated("2xH100", root, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	uuid := h.GPUs()[1].UUID
	if err := WriteSimMPSProcesses(root, uuid, []gpu.Process{{PID: 4321, UsedMemoryBytes: 3 << 30}, {PID: 99, UsedMemoryBytes: 1}}); err != nil {
		t.Fatal(err)
	}
	got, err := a.MPSProcesses(t.Context(), uuid)
	if err != nil || len(got) != 2 || got[0] != (gpu.Process{PID: 99, UsedMemoryBytes: 1}) || got[1] != (gpu.Process{PID: 4321, UsedMemoryBytes: 3 << 30}) {
		t.Errorf("MPSProcesses = %+v, %v", got, err)
	}
	if got, err := a.MPSProcesses(t.Context(), h.GPUs()[0].UUID); err != nil || len(got) != 0 {
		t.Errorf("a GPU without a file: %+v, %v; want none", got, err)
	}
	for name, content := range map[string]string{"not JSON": "{", "a bad PID": `[{"pid":-4,"used_memory_bytes":1}]`} {
		if err := os.WriteFile(SimMPSProcessesPath(root, uuid), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := a.MPSProcesses(t.Context(), uuid); err == nil {
			t.Errorf("%s: MPSProcesses = %+v, want an error", name, got)
		}
	}
	if err := WriteSimMPSProcesses(root, "../x", nil); err == nil {
		t.Error("a GPU UUID with a slash was accepted")
	}
	if filepath.Dir(SimMPSProcessesPath(root, uuid)) != filepath.Join(root, "mps-processes") {
		t.Errorf("path %s", SimMPSProcessesPath(root, uuid))
	}
}
