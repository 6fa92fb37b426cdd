package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"

	"yunion.io/x/mps-daemon/pkg/api"
)

// The store's pick reads a summary (per-GPU counters on SQLite, window
// functions on PostgreSQL), not the rows Pick is table-tested on: on the
// same rows, it must choose exactly what Pick chooses, for any mix of held,
// unhealthy, pending and mismatched rows, NUMA nodes, sharing modes and
// counts.
func TestStorePickIsPick(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		h := mustHost(t, s, "gpu-1")
		var batch []api.IsolatedDevice
		for g, bus := range []string{"06", "07", "08", "09"} {
			// GPUs of 4 to 10 slices, each kind of row on each of them,
			// the guest's on some more than on others.
			for i := range 4 + 2*g {
				d := slice(h.ID, bus, i)
				d.NumaNode = g / 2
				kind := (g*3 + i*5) % 8
				switch {
				case g == 1 && i == 4:
					kind = 0 // a second one of the guest's on GPU-07
				case g == 3 && kind == 0:
					kind = 7 // none of the guest's on GPU-09
				}
				switch kind {
				case 0:
					d.GuestID = "g"
				case 1:
					d.GuestID = "other"
				case 2:
					d.Unhealthy = true
				case 3:
					d.PendingRemoval = true
				case 4:
					d.SharingMode = "EXCLUSIVE"
				case 5:
					d.SharingMode = "MPS"
				}
				batch = append(batch, d)
			}
		}
		if _, err := s.CreateDevices(ctx, batch); err != nil {
			t.Fatal(err)
		}
		rows := readCandidates(t, s, h.ID)
		for count := 1; count <= len(batch)+1; count++ {
			for _, numa := range []int{AnyNUMANode, 0, 1} {
				for _, mode := range []string{"", "MPS"} {
					req := api.AttachRequest{DevType: api.DevTypeNvidiaMPS, Model: "Tesla P40", Host: "gpu-1", Count: count, SharingMode: mode}
					want, wantFree := Pick(slices.DeleteFunc(slices.Clone(rows), func(c Candidate) bool {
						return mode != "" && c.SharingMode != "" && c.SharingMode != mode && c.GuestID != "g"
					}), "g", count, numa)
					var got []string
					var gotFree int
					err := s.inTx(ctx, false, func(tx *sql.Tx) error {
						var err error
						got, gotFree, err = s.pick(ctx, tx, "g", req, numa)
						return err
					})
					if err != nil || !slices.Equal(got, want) || gotFree != wantFree {
						t.Errorf("count %d numa %d mode %q: store picks %q, %d free (%v); Pick %q, %d free", count, numa, mode, got, gotFree, err, want, wantFree)
					}
				}
			}
		}
	})
}

// readCandidates is every device row of hostID as Pick takes them.
func readCandidates(t *testing.T, s *Store, hostID string) []Candidate {
	t.Helper()
	rows, err := s.db.QueryContext(context.Background(), s.d.bind(`SELECT id, device_path, numa_node, seq, guest_id, unhealthy, pending_removal, sharing_mode
		FROM isolated_devices WHERE host_id = ?`), hostID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []Candidate
	for rows.Next() {
		var c Candidate
		if err := rows.Scan(&c.ID, &c.DevicePath, &c.NUMANode, &c.Seq, &c.GuestID, &c.Unhealthy, &c.PendingRemoval, &c.SharingMode); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal(fmt.Errorf("no rows on host %s", hostID))
	}
	return out
}
