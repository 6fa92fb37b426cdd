package agent

import (
	"context"
	"strings"
	"testing"
)

// A device attached after the last sync and taken out of the plan by the
// next reconcile keeps its CDI entry: the first write of that reconcile
// still goes by the previous sync's rows (no guest), the sync then reports
// the device held, and the spec is written again. (The DRA driver's
// prepared claims reach the agent the same way.)
func TestDeviceAttachedSinceTheLastSyncKeepsItsCDIEntryThroughAResize(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	held := h.byAddr()["db:00.0-1"]
	if _, err := h.inv.AttachIsolatedDevice(ctx, "pod-a", held.ID); err != nil {
		t.Fatal(err)
	}
	h.agent.cfg.Devices = mustDevices(t, h.dir, onlyGPU0)
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	name := twoGPUs()[1].UUID.String() + "::1"
	if !strings.Contains(h.cdiSpec(t), name) {
		t.Errorf("the held device %s lost its CDI entry in the reconcile that took its GPU out of the plan", name)
	}
	if strings.Contains(h.cdiSpec(t), twoGPUs()[1].UUID.String()+"::0") {
		t.Errorf("the free device of the GPU taken out is still in the CDI spec")
	}
}
