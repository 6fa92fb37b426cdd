package store

import (
	"testing"

	"yunion.io/x/mps-daemon/pkg/api"
)

// A database made before a field of the record existed (here: made, then
// the fields' columns dropped) gets their columns when opened: its rows
// read the zero value there, and the fields are stored from then on.
func TestOpenAddsTheColumnsOfNewRecordFields(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		old := open()
		mustHost(t, old, "gpu-1")
		d := slice("gpu-1", "1a", 0)
		d.CDIName, d.PCIEInfo, d.HotPluggable = "c", &api.PCIEInfo{LaneWidth: 16}, true
		before := mustDevice(t, old, d)
		for _, c := range []string{"mps_memory_total", "cdi_name", "pcie_info", "hot_pluggable"} {
			if _, err := old.db.ExecContext(ctx, `ALTER TABLE isolated_devices DROP COLUMN `+c); err != nil {
				t.Fatalf("dropping %s: %v", c, err)
			}
		}

		s := open()
		got, err := s.GetDevice(ctx, before.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.MPSMemoryTotal != 0 || got.CDIName != "" || got.PCIEInfo != nil || got.HotPluggable {
			t.Errorf("a row older than its fields reads %+v, want their zero values", got)
		}
		total, name, yes := 24576, "c2", true
		up, err := s.UpdateDevice(ctx, before.ID, DeviceUpdate{MPSMemoryTotal: &total, CDIName: &name, HotPluggable: &yes,
			SetPCIEInfo: true, PCIEInfo: &api.PCIEInfo{LaneWidth: 8}})
		if err != nil {
			t.Fatal(err)
		}
		if got, err = s.GetDevice(ctx, before.ID); err != nil || got.MPSMemoryTotal != total || got.CDIName != name ||
			!got.HotPluggable || got.PCIEInfo == nil || got.PCIEInfo.LaneWidth != 8 || got.UpdateVersion != up.UpdateVersion {
			t.Errorf("after the update: %+v, %v", got, err)
		}
		open() // a third open finds nothing to add
	})
}
