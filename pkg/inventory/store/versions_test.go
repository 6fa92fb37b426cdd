package store

import (
	"errors"
	"testing"

	"yunion.io/x/mps-daemon/pkg/api"
)

// versionOf is the devices version of host id, which must exist and have one.
func versionOf(t *testing.T, s *Store, id string) int64 {
	t.Helper()
	hv, err := s.DevicesVersion(t.Context(), id)
	if err != nil {
		t.Fatalf("DevicesVersion(%s): %v", id, err)
	}
	if hv.HostID != id || hv.Version == 0 {
		t.Fatalf("DevicesVersion(%s) = %+v, want the host's id and a version", id, hv)
	}
	return hv.Version
}

// Every write of a host's rows gives the host a new version, whoever
// writes them: the store's own writes of every kind, a second process on
// the same database, and statements typed in a SQL shell. Writes of
// another host's rows, reads and writes that change no row leave it as it
// is. No version is ever handed out twice, to one host or to two.
func TestDevicesVersionChangesWithEveryWrite(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s, other := open(), open()
		devs := allocHost(t, s, "gpu-1")
		hostID := devs[0].HostID
		otherHost := allocHost(t, s, "gpu-2")[0].HostID
		seen := map[int64]string{}
		last := versionOf(t, s, hostID)
		seen[last] = "after the fill"
		seen[versionOf(t, s, otherHost)] = "the other host"
		changed := func(what string) {
			t.Helper()
			v := versionOf(t, s, hostID)
			if v == last {
				t.Errorf("%s: version still %d", what, v)
			}
			if by, dup := seen[v]; dup {
				t.Errorf("%s: version %d was handed out before (%s)", what, v, by)
			}
			seen[v], last = what, v
		}
		unchanged := func(what string) {
			t.Helper()
			if v := versionOf(t, s, hostID); v != last {
				t.Errorf("%s: version changed %d -> %d", what, last, v)
			}
		}

		if _, _, err := s.ListDevices(ctx, DeviceFilter{HostID: hostID, Limit: 20}); err != nil {
			t.Fatal(err)
		}
		unchanged("a list")
		mustDevice(t, s, slice(otherHost, "08", 0))
		unchanged("a device of another host")

		mustDevice(t, s, slice(hostID, "08", 0))
		changed("create")
		bulk, err := s.CreateDevices(ctx, []api.IsolatedDevice{slice(hostID, "09", 0), slice(hostID, "09", 1)})
		if err != nil {
			t.Fatal(err)
		}
		changed("bulk create")
		limit := 999
		if _, err := s.UpdateDevice(ctx, devs[0].ID, DeviceUpdate{MPSMemoryLimit: &limit}); err != nil {
			t.Fatal(err)
		}
		changed("update")
		if _, err := s.AttachDevice(ctx, "pod-1", devs[1].ID); err != nil {
			t.Fatal(err)
		}
		changed("attach by id")
		if _, err := s.DetachDevice(ctx, "pod-2", devs[1].ID); err == nil {
			t.Fatal("a detach by a guest that does not hold the device succeeded")
		}
		unchanged("a refused detach")
		if _, err := s.AttachDevices(ctx, "pod-2", api.AttachRequest{Model: "Tesla P40", Host: "gpu-1", Count: 2}); err != nil {
			t.Fatal(err)
		}
		changed("attach by model")
		if _, err := other.DetachAll(ctx, "pod-2"); err != nil {
			t.Fatal(err)
		}
		changed("detach-all through another process's store")
		if _, err := s.DetachDevice(ctx, "pod-1", devs[1].ID); err != nil {
			t.Fatal(err)
		}
		changed("detach")
		if _, _, err := s.PurgeDevice(ctx, devs[2].ID, false); err != nil {
			t.Fatal(err)
		}
		changed("purge")
		if _, err := s.DeleteDevice(ctx, devs[3].ID); err != nil {
			t.Fatal(err)
		}
		changed("delete")

		// An operator's statements, as typed in psql or sqlite3.
		if _, err := s.db.ExecContext(ctx, s.d.bind(`UPDATE isolated_devices SET mps_memory_limit = 1 WHERE id = ?`), devs[4].ID); err != nil {
			t.Fatal(err)
		}
		changed("an UPDATE in a SQL shell")
		if _, err := s.db.ExecContext(ctx, s.d.bind(`UPDATE isolated_devices SET mps_memory_limit = 1 WHERE id = ?`), devs[4].ID); err != nil {
			t.Fatal(err)
		}
		changed("the same UPDATE again (no value changed, but the row was written)")
		if _, err := s.db.ExecContext(ctx, s.d.bind(`UPDATE isolated_devices SET host_id = ? WHERE id = ?`), otherHost, bulk[0].ID); err != nil {
			t.Fatal(err)
		}
		changed("a row moved to another host")
		if v := versionOf(t, s, otherHost); seen[v] != "" {
			t.Errorf("the host a row moved to kept or reused version %d (%s)", v, seen[v])
		}
		if _, err := s.db.ExecContext(ctx, s.d.bind(`DELETE FROM isolated_devices WHERE id = ?`), devs[6].ID); err != nil {
			t.Fatal(err)
		}
		changed("a DELETE in a SQL shell")
		if _, err := s.db.ExecContext(ctx, s.d.bind(`UPDATE isolated_devices SET model = 'x' WHERE id = 'no such device'`)); err != nil {
			t.Fatal(err)
		}
		unchanged("an UPDATE of no row")

		// A new host has a version of its own from the start.
		h3 := mustHost(t, s, "gpu-3")
		if v := versionOf(t, s, h3.ID); seen[v] != "" {
			t.Errorf("a new host got version %d, handed out before (%s)", v, seen[v])
		}
	})
}

// The version is read with the host's id or its name, in one statement;
// an unknown host is ErrNotFound, and a host without a version (one made
// by hand, or whose version row was deleted) has version 0, which equals
// no version the database hands out.
func TestDevicesVersionOfUnknownAndBareHosts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		h := mustHost(t, s, "gpu-1")
		byName, err := s.DevicesVersion(ctx, "gpu-1")
		if err != nil || byName.HostID != h.ID || byName.Version != versionOf(t, s, h.ID) {
			t.Errorf("by name: %+v, %v; want host %s at its version", byName, err, h.ID)
		}
		// A host whose name is another's id: the id wins, as a path's.
		if twin := mustHost(t, s, h.ID); twin.ID == h.ID {
			t.Fatal("two hosts with one id")
		} else if hv, err := s.DevicesVersion(ctx, h.ID); err != nil || hv.HostID != h.ID {
			t.Errorf("by an id that is also another host's name: %+v, %v; want host %s", hv, err, h.ID)
		}
		if _, err := s.DevicesVersion(ctx, "typo"); !errors.Is(err, ErrNotFound) {
			t.Errorf("unknown host: err = %v, want ErrNotFound", err)
		}
		if _, err := s.db.ExecContext(ctx, s.d.bind(`DELETE FROM isolated_device_versions WHERE host_id = ?`), h.ID); err != nil {
			t.Fatal(err)
		}
		if hv, err := s.DevicesVersion(ctx, h.ID); err != nil || hv.Version != 0 {
			t.Errorf("host without a version row: %+v, %v; want version 0", hv, err)
		}
		mustDevice(t, s, slice(h.ID, "06", 0))
		versionOf(t, s, h.ID) // has one again

		// A host deleted by hand, in a shell whose foreign keys are off
		// (sqlite3's default), takes its version with it.
		gone := mustHost(t, s, "gpu-gone")
		conn, err := s.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if s.d.name == "sqlite" {
			if _, err := conn.ExecContext(ctx, `PRAGMA foreign_keys = OFF`); err != nil {
				t.Fatal(err)
			}
			defer conn.ExecContext(ctx, `PRAGMA foreign_keys = ON`) //nolint:errcheck
		}
		if _, err := conn.ExecContext(ctx, s.d.bind(`DELETE FROM hosts WHERE id = ?`), gone.ID); err != nil {
			t.Fatal(err)
		}
		if hv, err := s.DevicesVersion(ctx, gone.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("a host deleted by hand: %+v, %v; want ErrNotFound", hv, err)
		}
	})
}

// A marker page of one host answers the host's version as the page's own
// snapshot saw it: the version read after it is the same while nothing
// was written, and any write after the page changes it.
func TestMarkerPageCarriesItsHostVersion(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		devs := allocHost(t, s, "gpu-1")
		hostID := devs[0].HostID
		page, err := s.ListDevicesByMarker(ctx, DeviceFilter{HostID: "gpu-1", Limit: 3}, "", false)
		if err != nil {
			t.Fatal(err)
		}
		if page.HostVersion == 0 || page.HostVersion != versionOf(t, s, hostID) {
			t.Errorf("page's version %d, the host's %d", page.HostVersion, versionOf(t, s, hostID))
		}
		if _, err := s.AttachDevice(ctx, "pod-1", devs[7].ID); err != nil {
			t.Fatal(err)
		}
		if page.HostVersion == versionOf(t, s, hostID) {
			t.Error("an attach after the page left the version the page answered")
		}
		all, err := s.ListDevicesByMarker(ctx, DeviceFilter{Limit: 3}, "", false)
		if err != nil || all.HostVersion != 0 {
			t.Errorf("a page of no host answered version %d (%v), want none", all.HostVersion, err)
		}
	})
}
