package dra

import (
	"context"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"yunion.io/x/mps-daemon/pkg/ledger"
)

// rebuildTimeout bounds the API server's answers to a rebuild.
const rebuildTimeout = 10 * time.Second

// rebuild rebuilds the ledger's claims from the API server after a
// corrupt checkpoint (ledger.Rebuild), once the plugin has a client and a
// reconcile has said what the node has: every ResourceClaim allocated a
// device of this node's pool and reserved for a pod, with the devices as
// the node's ResourceSlices still have those the plan no longer does.
// Until it succeeds nothing is published, prepared or unprepared.
func (d *Driver) rebuild(ctx context.Context) error {
	d.mu.Lock()
	client := d.client
	d.mu.Unlock()
	if client == nil || !d.ledger.RebuildPending() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, rebuildTimeout)
	defer cancel()
	claims, err := d.listClaims(ctx)
	if err != nil {
		return fmt.Errorf("rebuilding the DRA checkpoint: %w", err)
	}
	published, err := d.listPublished(ctx)
	if err != nil {
		return fmt.Errorf("rebuilding the DRA checkpoint: %w", err)
	}
	allocs := make([]ledger.Allocation, len(claims))
	for i := range claims {
		allocs[i] = d.allocationOf(&claims[i])
	}
	if err := d.ledger.Rebuild(allocs, published); err != nil {
		return err
	}
	d.noteChanged()
	return nil
}

// listClaims lists every ResourceClaim, a page at a time.
func (d *Driver) listClaims(ctx context.Context) ([]resourceapi.ResourceClaim, error) {
	var out []resourceapi.ResourceClaim
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := d.client.ResourceV1().ResourceClaims("").List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing ResourceClaims: %w", err)
		}
		out = append(out, list.Items...)
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}

// listPublished reads back the devices of the node's pool as its
// ResourceSlices have them (a previous run published them), by name.
func (d *Driver) listPublished(ctx context.Context) (map[string]ledger.Device, error) {
	list, err := d.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + d.opts.DriverName})
	if err != nil {
		return nil, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	out := map[string]ledger.Device{}
	for _, s := range list.Items {
		if s.Spec.Pool.Name != d.Pool() {
			continue
		}
		for _, dv := range s.Spec.Devices {
			if dev, ok := deviceFromSlice(dv); ok {
				out[dev.Name] = dev
			}
		}
	}
	return out, nil
}
