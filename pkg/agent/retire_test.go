package agent

import (
	"context"
	"testing"

	"yunion.io/x/mps-daemon/pkg/gpu"
)

const onlyGPU0 = "devices:\n- path: 0000:1a:00.0\n  type: NVIDIA_MPS\n  virtual_number: 4\n"

// A GPU taken out of the configuration gets back the compute mode the daemon
// found, once nothing holds it; taken back, it is set again.
func TestRetiredGPUGetsItsComputeModeBack(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	h.backend.gpus[1].ComputeMode = gpu.ComputeModeProhibited
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	mode := func(i int) gpu.ComputeMode {
		h.backend.mu.Lock()
		defer h.backend.mu.Unlock()
		return h.backend.gpus[i].ComputeMode
	}
	if mode(1) != gpu.ComputeModeExclusiveProcess {
		t.Fatalf("GPU 1 in %s, want Exclusive_Process", mode(1))
	}

	// Out of the configuration while a guest holds one of its devices: MPS
	// and the compute mode stay.
	held := h.byAddr()["db:00.0-0"]
	if _, err := h.inv.AttachIsolatedDevice(ctx, "pod-a", held.ID); err != nil {
		t.Fatal(err)
	}
	h.agent.cfg.Devices = mustDevices(t, h.dir, onlyGPU0)
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if mode(1) != gpu.ComputeModeExclusiveProcess {
		t.Errorf("GPU 1 left Exclusive_Process (%s) while a guest holds one of its devices", mode(1))
	}

	// Released: the control daemon stops and the mode the GPU had comes back.
	if _, err := h.inv.DetachIsolatedDevice(ctx, "pod-a", held.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if mode(1) != gpu.ComputeModeProhibited || mode(0) != gpu.ComputeModeExclusiveProcess {
		t.Errorf("after retiring GPU 1: modes %s, %s; want Exclusive_Process, Prohibited", mode(0), mode(1))
	}
	modes, err := h.agent.mps.modes.Previous()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := modes[twoGPUs()[1].UUID]; ok {
		t.Errorf("GPU 1's restored mode is still recorded: %v", modes)
	}
	// Another reconcile does not touch it again.
	before := len(h.backend.setModes)
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if len(h.backend.setModes) != before {
		t.Errorf("compute modes set again with nothing changed: %v", h.backend.setModes[before:])
	}

	// Taken back: Exclusive_Process again, and Prohibited recorded again.
	h.agent.cfg.Devices = mustDevices(t, h.dir, fourAndTwo)
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if mode(1) != gpu.ComputeModeExclusiveProcess {
		t.Errorf("GPU 1 taken back is in %s, want Exclusive_Process", mode(1))
	}
	if modes, _ := h.agent.mps.modes.Previous(); modes[twoGPUs()[1].UUID] != "Prohibited" {
		t.Errorf("the mode to restore is not recorded again: %v", modes)
	}
}

// Compute modes that are no longer the daemon's to set go back too.
func TestComputeModeRestoredWhenNoLongerSet(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	h.agent.cfg.Host.SetExclusiveComputeMode = false
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	for i, g := range h.backend.gpus {
		if g.ComputeMode != gpu.ComputeModeDefault {
			t.Errorf("GPU %d in %s after mps_set_exclusive_compute_mode: false, want Default back", i, g.ComputeMode)
		}
	}
}
