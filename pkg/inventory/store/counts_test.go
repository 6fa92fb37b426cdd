package store

import (
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"

	"yunion.io/x/mps-daemon/pkg/api"
)

// countsBy runs q and answers its rows' counts by key, as scan reads each
// row; zero counts are left out (a counter row may stay at 0).
func countsBy(t *testing.T, s *Store, q string, scan func(*sql.Rows) (string, int64, error)) map[string]int64 {
	t.Helper()
	rows, err := s.db.QueryContext(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m := map[string]int64{}
	for rows.Next() {
		key, n, err := scan(rows)
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			m[key] = n
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// checkCounts fails t unless isolated_device_counts holds exactly the
// number of devices of every (stripe, dev_type, model, unhealthy,
// pending_removal, held): the totals ListDevices answers from it are then
// COUNT(*)'s.
func checkCounts(t *testing.T, s *Store) {
	t.Helper()
	scan := func(rows *sql.Rows) (string, int64, error) {
		var stripe, devType, model string
		var unhealthy, pending, held bool
		var n int64
		err := rows.Scan(&stripe, &devType, &model, &unhealthy, &pending, &held, &n)
		return fmt.Sprint(stripe, "/", devType, "/", model, "/", unhealthy, pending, held), n, err
	}
	counters := countsBy(t, s, `SELECT stripe, dev_type, model, unhealthy, pending_removal, held, n FROM isolated_device_counts`, scan)
	rows := countsBy(t, s, `SELECT substr(host_id, 1, 1), dev_type, model, unhealthy, pending_removal, guest_id <> '', COUNT(*)
		FROM isolated_devices GROUP BY 1, 2, 3, 4, 5, 6`, scan)
	if !maps.Equal(counters, rows) {
		t.Errorf("counters %v\ndevices  %v", counters, rows)
	}
	if s.d.name == "sqlite" {
		checkGPUCounts(t, s)
	}
}

// checkGPUCounts fails t unless isolated_device_gpus (SQLite, read by the
// picker) holds exactly the free devices of every (host, dev_type, model,
// device_path, numa_node, sharing_mode).
func checkGPUCounts(t *testing.T, s *Store) {
	t.Helper()
	scan := func(rows *sql.Rows) (string, int64, error) {
		var host, devType, model, path, sharing string
		var numa int
		var n int64
		err := rows.Scan(&host, &devType, &model, &path, &numa, &sharing, &n)
		return fmt.Sprint(host, "/", devType, "/", model, "/", path, "/", numa, "/", sharing), n, err
	}
	counters := countsBy(t, s, `SELECT host_id, dev_type, model, device_path, numa_node, sharing_mode, free FROM isolated_device_gpus`, scan)
	rows := countsBy(t, s, `SELECT host_id, dev_type, model, device_path, numa_node, sharing_mode, COUNT(*) FROM isolated_devices
		WHERE guest_id = '' AND NOT unhealthy AND NOT pending_removal GROUP BY 1, 2, 3, 4, 5, 6`, scan)
	if !maps.Equal(counters, rows) {
		t.Errorf("GPU counters %v\nfree devices %v", counters, rows)
	}
}

// Every kind of write keeps the counters exact, and the totals ListDevices
// answers from them are the number of rows that match.
func TestCountsFollowEveryWrite(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		devs := allocHost(t, s, "gpu-1")
		h2 := mustHost(t, s, "gpu-2")
		batch := []api.IsolatedDevice{slice(h2.ID, "06", 0), slice("gpu-2", "06", 1), slice(h2.ID, "06", 2)}
		batch[1].Model, batch[2].GuestID, batch[2].Unhealthy = "NVIDIA H100", "pod-x", true
		created, err := s.CreateDevices(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		checkCounts(t, s)

		model, yes := "Tesla P40 (renamed)", true
		steps := []struct {
			name string
			do   func() error
		}{
			{"attach by id", func() error { _, err := s.AttachDevice(ctx, "pod-a", devs[0].ID); return err }},
			{"attach by model", func() error {
				_, err := s.AttachDevices(ctx, "pod-b", api.AttachRequest{Model: "Tesla P40", Host: "gpu-1", Count: 3})
				return err
			}},
			{"attach on another host", func() error { _, err := s.AttachDevice(ctx, "pod-b", devs[7].ID); return err }},
			{"update flags", func() error {
				_, err := s.UpdateDevice(ctx, devs[1].ID, DeviceUpdate{Unhealthy: &yes, PendingRemoval: &yes})
				return err
			}},
			{"update model", func() error { _, err := s.UpdateDevice(ctx, devs[2].ID, DeviceUpdate{Model: &model}); return err }},
			{"update dev_type", func() error {
				devType := "GPU-HPC"
				_, err := s.UpdateDevice(ctx, devs[5].ID, DeviceUpdate{DevType: &devType})
				return err
			}},
			// No counted column changes (PostgreSQL's update trigger
			// still runs, and must append nothing that counts).
			{"update name and memory", func() error {
				name, mem := "renamed-6", 1024
				_, err := s.UpdateDevice(ctx, devs[6].ID, DeviceUpdate{Name: &name, MPSMemoryLimit: &mem})
				return err
			}},
			{"update GPU, NUMA node and sharing mode", func() error {
				path, numa, mode := "GPU-moved", 1, "MPS"
				_, err := s.UpdateDevice(ctx, devs[4].ID, DeviceUpdate{DevicePath: &path, NumaNode: &numa, SharingMode: &mode})
				return err
			}},
			{"detach by id", func() error { _, err := s.DetachDevice(ctx, "pod-a", devs[0].ID); return err }},
			// By name: the one-statement release by id changes nothing,
			// and the release that follows the device's read does.
			{"detach by name", func() error { _, err := s.DetachDevice(ctx, "pod-b", devs[7].Name); return err }},
			{"attach by id again", func() error { _, err := s.AttachDevice(ctx, "pod-b", devs[7].ID); return err }},
			{"detach all", func() error { _, err := s.DetachAll(ctx, "pod-b"); return err }},
			{"detach of a free device", func() error { _, err := s.DetachDevice(ctx, "pod-a", devs[6].ID); return err }},
			{"delete", func() error { _, err := s.DeleteDevice(ctx, devs[3].ID); return err }},
			{"force purge", func() error { _, _, err := s.PurgeDevice(ctx, created[2].ID, true); return err }},
		}
		for _, st := range steps {
			if err := st.do(); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			checkCounts(t, s)
		}

		// The totals ListDevices answers from the counters.
		for _, f := range []DeviceFilter{
			{}, {Models: []string{"Tesla P40"}}, {DevTypes: []string{api.DevTypeNvidiaMPS}, Models: []string{model}}, {Unused: true},
			{Unhealthy: &yes}, {PendingRemoval: &yes}, {Unused: true, Models: []string{"NVIDIA H100"}},
		} {
			f.Limit = 100
			got, total, err := s.ListDevices(ctx, f)
			if err != nil || total != len(got) {
				t.Errorf("%+v: total %d, %d rows (%v)", f, total, len(got), err)
			}
		}
	})
}

// Writers on two pools, each guest taking devices of several hosts and
// releasing them all at once, while a host flips its devices' health: on
// PostgreSQL every one of these takes counter row locks, and none may
// deadlock (that would surface as an error here) or leave a counter wrong.
func TestConcurrentWritesKeepCounts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		stores := []*Store{open(), open()}
		var devs []api.IsolatedDevice
		var hosts []string
		for i := range 3 {
			name := fmt.Sprintf("gpu-%d", i)
			devs = append(devs, allocHost(t, stores[0], name)...)
			hosts = append(hosts, name)
		}
		const workers, ops = 6, 30
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				s := stores[w%2]
				guest := fmt.Sprintf("pod-%d", w)
				for range ops {
					var err error
					switch op := rand.N(10); {
					case op < 3:
						_, err = s.AttachDevice(ctx, guest, devs[rand.N(len(devs))].ID)
					case op < 6:
						_, err = s.AttachDevices(ctx, guest, api.AttachRequest{Model: "Tesla P40", Host: hosts[rand.N(len(hosts))], Count: 1 + rand.N(2)})
					case op < 8:
						_, err = s.DetachAll(ctx, guest)
					default:
						flag := rand.N(2) == 0
						_, err = s.UpdateDevice(ctx, devs[rand.N(len(devs))].ID, DeviceUpdate{Unhealthy: &flag})
					}
					if err != nil && !errors.Is(err, ErrInUse) {
						t.Errorf("worker %d: %v", w, err)
						return
					}
				}
			})
		}
		wg.Wait()
		checkCounts(t, stores[1])
	})
}

// On PostgreSQL the counters' changes are appended as delta rows and folded
// into the counters one in about every 256 deltas (migration 0008). After
// hundreds of attaches and detaches the deltas must have been folded (else
// every list's total reads an ever longer table), and the totals still be
// exact.
func TestCountDeltasAreFolded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		if s.d.name == "sqlite" {
			t.Skip("SQLite's counters are updated in place (migration 0004)")
		}
		devs := allocHost(t, s, "gpu-1")
		const pairs = 200 // 2 deltas each way: 800 in all
		for i := range pairs {
			d := devs[i%len(devs)]
			if _, err := s.AttachDevice(ctx, "pod-a", d.ID); err != nil {
				t.Fatalf("attach %d: %v", i, err)
			}
			if _, err := s.DetachDevice(ctx, "pod-a", d.ID); err != nil {
				t.Fatalf("detach %d: %v", i, err)
			}
		}
		var deltas int
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM isolated_device_counts_deltas`).Scan(&deltas); err != nil {
			t.Fatal(err)
		}
		if deltas >= 256 {
			t.Errorf("%d delta rows after %d attach and detach pairs: never folded", deltas, pairs)
		}
		checkCounts(t, s)
	})
}
