//go:build cgo

package nvmlsim

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"yunion.io/x/mps-daemon/pkg/gpu"
)

// TestSimClientsFromAnotherProcess: what WriteMPSProcesses puts under a
// simulated host's root (a test driving `mps-daemon --simulate` does it
// from its own process) is what that host's NVML lists; a broken file is
// an NVML error, never an empty list.
func TestSimClientsFromAnotherProcess(t *testing.T) {
	root := t.TempDir()
	a, h, err := New("2xH100", root, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	uuid := h.GPUs()[1].UUID
	if err := WriteMPSProcesses(root, uuid, []gpu.Process{{PID: 4321, UsedMemoryBytes: 3 << 30}, {PID: 99, UsedMemoryBytes: 1}}); err != nil {
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
		if err := os.WriteFile(MPSProcessesPath(root, uuid), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := a.MPSProcesses(t.Context(), uuid); err == nil {
			t.Errorf("%s: MPSProcesses = %+v, want an error", name, got)
		}
	}
	if err := WriteMPSProcesses(root, "../x", nil); err == nil {
		t.Error("a GPU UUID with a slash was accepted")
	}
	if filepath.Dir(MPSProcessesPath(root, uuid)) != filepath.Join(root, "mps-processes") {
		t.Errorf("path %s", MPSProcessesPath(root, uuid))
	}
}

func TestSimulatedMPSProcesses(t *testing.T) {
	a, h := newSim(t, "2xH200")
	gpus := h.GPUs()
	// A fresh simulated host runs no MPS clients.
	for _, g := range gpus {
		got, err := a.MPSProcesses(t.Context(), g.UUID)
		if err != nil || len(got) != 0 {
			t.Fatalf("MPSProcesses(%s) on a fresh host = %v, %v; want none", g.UUID, got, err)
		}
	}
	set := []gpu.Process{{PID: 981, UsedMemoryBytes: 20368 << 20}, {PID: 42, UsedMemoryBytes: 1168 << 20}}
	if err := h.SetMPSProcesses(gpus[1].UUID, set); err != nil {
		t.Fatal(err)
	}
	got, err := a.MPSProcesses(t.Context(), gpus[1].UUID)
	if err != nil {
		t.Fatal(err)
	}
	want := []gpu.Process{{PID: 42, UsedMemoryBytes: 1168 << 20}, {PID: 981, UsedMemoryBytes: 20368 << 20}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("MPSProcesses = %+v, want %+v (sorted by PID)", got, want)
	}
	if other, err := a.MPSProcesses(t.Context(), gpus[0].UUID); err != nil || len(other) != 0 {
		t.Errorf("the other GPU lists %v, %v; want none", other, err)
	}
	if err := h.SetMPSProcesses(gpus[1].UUID, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := a.MPSProcesses(t.Context(), gpus[1].UUID); err != nil || len(got) != 0 {
		t.Errorf("after clearing: %v, %v", got, err)
	}
	if err := h.SetMPSProcesses("GPU-nope", set); err == nil {
		t.Error("SetMPSProcesses on an unknown GPU succeeded")
	}
	if err := h.SetMPSProcesses(gpus[0].UUID, []gpu.Process{{PID: -1}}); err == nil {
		t.Error("SetMPSProcesses with PID -1 succeeded")
	}
	if _, err := a.MPSProcesses(t.Context(), "GPU-nope"); err == nil || !strings.Contains(err.Error(), "GPU-nope") {
		t.Errorf("MPSProcesses of an unknown GPU: %v", err)
	}
	// A FIFO in place of the file is refused at once, not waited on.
	path := MPSProcessesPath(h.root, gpus[0].UUID)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := a.MPSProcesses(t.Context(), gpus[0].UUID); err == nil {
		t.Errorf("MPSProcesses with a FIFO for the list: %v", err)
	}
}
