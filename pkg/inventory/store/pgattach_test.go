package store

import (
	"errors"
	"slices"
	"testing"

	"yunion.io/x/mps-daemon/pkg/api"
)

// A model attach names its host, here by name; PostgreSQL's attach sends
// its summary for the id it last saw under that name (pgattach.go). A host
// that another process deletes and makes again under the same name has a
// new id: the attach picks from the new host's devices, whether the old id
// is still what this Store last saw (made again twice in a row) or was
// dropped by a "not found" in between.
func TestAttachAfterHostMadeAgain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		s, other := open(), open()
		ctx := t.Context()
		req := api.AttachRequest{Model: "Tesla P40", Host: "gpu-1", Count: 1}
		attachFrom := func(devs []api.IsolatedDevice) {
			t.Helper()
			for _, count := range []int{1, 2} {
				req.Count = count
				got, err := s.AttachDevices(ctx, "g", req)
				if err != nil {
					t.Fatalf("attach of %d: %v", count, err)
				}
				for _, d := range got {
					if !slices.Contains(ids(devs), d.ID) || d.HostID != devs[0].HostID {
						t.Fatalf("attach of %d got %s of host %s, not one of host %s's", count, d.ID, d.HostID, devs[0].HostID)
					}
				}
				if _, err := s.DetachAll(ctx, "g"); err != nil {
					t.Fatal(err)
				}
			}
		}
		remove := func(devs []api.IsolatedDevice) {
			t.Helper()
			for _, d := range devs {
				if _, err := other.DeleteDevice(ctx, d.ID); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := other.DeleteHost(ctx, "gpu-1"); err != nil {
				t.Fatal(err)
			}
		}
		first := allocHost(t, s, "gpu-1")
		attachFrom(first)
		remove(first)
		second := allocHost(t, other, "gpu-1")
		attachFrom(second) // the first host's id was the last seen
		remove(second)
		req.Count = 1
		if _, err := s.AttachDevices(ctx, "g", req); !errors.Is(err, ErrNotFound) {
			t.Fatalf("attach on a host gone: %v, want ErrNotFound", err)
		}
		attachFrom(allocHost(t, other, "gpu-1"))
	})
}
