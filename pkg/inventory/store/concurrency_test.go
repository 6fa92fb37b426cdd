package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

// Several mps-inventory processes starting at once on one database: every
// one opens it, the migrations are applied once, and each then sees what
// the others write.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			dsn := b.dsn(t)
			const n = 8
			stores := make([]*Store, n)
			errs := make([]error, n)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					<-start
					stores[i], errs[i] = Open(t.Context(), dsn, nil)
				})
			}
			close(start)
			wg.Wait()
			for i, s := range stores {
				if errs[i] != nil {
					t.Fatalf("store %d: %v", i, errs[i])
				}
				t.Cleanup(func() { _ = s.Close() })
			}
			ms, err := loadMigrations(stores[0].d.migrations)
			if err != nil {
				t.Fatal(err)
			}
			var rows, maxVersion int
			err = stores[0].db.QueryRowContext(t.Context(), `SELECT COUNT(*), MAX(version) FROM schema_migrations`).Scan(&rows, &maxVersion)
			if err != nil || rows != len(ms) || maxVersion != len(ms) {
				t.Errorf("schema_migrations has %d rows up to version %d (%v); want %d", rows, maxVersion, err, len(ms))
			}

			first, last := stores[0], stores[n-1]
			h := mustHost(t, first, "gpu-1")
			if got, err := last.GetHost(t.Context(), "gpu-1"); err != nil || got != h {
				t.Fatalf("the other store reads %+v, %v; want %+v", got, err, h)
			}
			d := mustDevice(t, last, slice(h.ID, "06", 0))
			devs, total, err := first.ListDevices(t.Context(), DeviceFilter{HostID: "gpu-1", Limit: 10})
			if err != nil || total != 1 || len(devs) != 1 || devs[0].ID != d.ID {
				t.Errorf("the first store lists %d/%d devices (%v); want the one the other created", len(devs), total, err)
			}
		})
	}
}

// Two processes registering the same device at once (a host's sync retried
// against another inventory): exactly one row, the others told ErrDuplicate.
func TestConcurrentDuplicateCreateGivesOneRow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		stores := []*Store{open(), open()}
		h := mustHost(t, stores[0], "gpu-1")
		const n = 16
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				_, errs[i] = stores[i%2].CreateDevice(t.Context(), slice(h.ID, "06", 0))
			})
		}
		wg.Wait()
		created := 0
		for _, err := range errs {
			switch {
			case err == nil:
				created++
			case !errors.Is(err, ErrDuplicate):
				t.Errorf("CreateDevice: %v, want success or ErrDuplicate", err)
			}
		}
		_, total, err := stores[1].ListDevices(t.Context(), DeviceFilter{Limit: 0})
		if created != 1 || total != 1 || err != nil {
			t.Errorf("%d creates succeeded, %d rows (%v); want exactly one", created, total, err)
		}
	})
}

// Two writers changing different fields of one host through two pools: no
// update is lost, the last value each wrote stays.
func TestConcurrentHostUpdatesLoseNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		a, b := open(), open()
		mustHost(t, a, "gpu-1")
		const rounds = 40
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := range rounds {
				ip := fmt.Sprintf("10.0.0.%d", i)
				if _, err := a.UpdateHost(t.Context(), "gpu-1", HostUpdate{AccessIP: &ip}); err != nil {
					t.Errorf("UpdateHost access_ip: %v", err)
				}
			}
		})
		wg.Go(func() {
			for i := range rounds {
				typ := fmt.Sprintf("type-%d", i)
				if _, err := b.UpdateHost(t.Context(), "gpu-1", HostUpdate{HostType: &typ}); err != nil {
					t.Errorf("UpdateHost host_type: %v", err)
				}
			}
		})
		wg.Wait()
		h, err := a.GetHost(t.Context(), "gpu-1")
		want := fmt.Sprintf("10.0.0.%d type-%d", rounds-1, rounds-1)
		if got := h.AccessIP + " " + h.HostType; err != nil || got != want {
			t.Errorf("host ends as %q (%v), want %q", got, err, want)
		}
	})
}

// An operator deleting a host while its agent registers a device on it:
// either the host goes and the device is refused (ErrNotFound), or the
// device is created and the delete refused (ErrNotEmpty); never a device left
// on a deleted host, never a database error.
func TestDeleteHostRacingCreateDevice(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		a, b := open(), open()
		const rounds = 30
		outcomes := map[string]int{}
		for i := range rounds {
			h := mustHost(t, a, fmt.Sprintf("gpu-%d", i))
			var delErr, createErr error
			var wg sync.WaitGroup
			wg.Go(func() { _, delErr = a.DeleteHost(t.Context(), h.ID) })
			wg.Go(func() { _, createErr = b.CreateDevice(t.Context(), slice(h.ID, "06", 0)) })
			wg.Wait()
			switch {
			case delErr == nil && errors.Is(createErr, ErrNotFound):
				outcomes["host deleted"]++
			case createErr == nil && errors.Is(delErr, ErrNotEmpty):
				outcomes["device created"]++
			default:
				t.Fatalf("round %d: DeleteHost: %v; CreateDevice: %v", i, delErr, createErr)
			}
		}
		t.Logf("outcomes over %d rounds: %v", rounds, outcomes)
		devs, _, err := a.ListDevices(t.Context(), DeviceFilter{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range devs {
			if _, err := a.GetHost(t.Context(), d.HostID); err != nil {
				t.Errorf("device %s on a missing host: %v", d.Addr, err)
			}
		}
	})
}
