package region

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/cloudpods"
)

// What the backend reads from the region's answers, checked against the
// real region (Cloudpods master): the answers docs/cloudpods.md describes.

// The data-model probe: this region's isolated_devices has sharing_mode
// (the GPU-row model); a column its table lacks is answered 400 "model has
// no field <column>", which is what a region of the per-slice model, whose
// table lacks sharing_mode, answers to the same probe.
func TestModelProbeTellsColumnsApart(t *testing.T) {
	c := cloudpods.Get(t)
	ctx := context.Background()
	b := newBackend(t, c, c.HostMAC, Options{})
	if m, err := b.modelBy(ctx, c.HostID, modelColumn); err != nil || m != ModelGPU {
		t.Fatalf("probing %s: %q %v, want %q", modelColumn, m, err, ModelGPU)
	}
	const missing = "mps_no_such_column"
	err := c.Call(ctx, http.MethodGet, pathModelProbe+"?"+modelQuery(c.HostID, missing).Encode(), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "model has no field "+missing) {
		t.Fatalf("the region's answer for a column it lacks: %v, want 400 \"model has no field %s\"", err, missing)
	}
	if m, err := b.modelBy(ctx, c.HostID, missing); err != nil || m != ModelPerSlice {
		t.Fatalf("probing %s: %q %v, want %q", missing, m, err, ModelPerSlice)
	}
}
