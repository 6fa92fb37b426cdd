package store_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/pgtest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// BenchmarkAttachDetach is the store's share of mps-inventory-bench's
// attach + detach: 8 concurrent callers (whatever GOMAXPROCS is), each
// attaching one slice of a random host's model to a new guest and
// detaching it, with no HTTP in between. One op is the pair; pairs/s is
// the rate (docs/benchmarks.md).
//
//	go test -run '^$' -bench AttachDetach -benchtime 5s ./pkg/inventory/store
func BenchmarkAttachDetach(b *testing.B) {
	forEachBenchBackend(b, func(b *testing.B, s *store.Store) {
		hosts := benchHosts(b, s, 5, 8, 8)
		var guests atomic.Int64
		b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
		b.ResetTimer()
		cpu0 := processCPU(b)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				h := hosts[rand.IntN(len(hosts))]
				guest := fmt.Sprintf("bench-%d", guests.Add(1))
				devs, err := s.AttachDevices(b.Context(), guest, api.AttachRequest{Model: "NVIDIA H100 80GB HBM3", Host: h, Count: 1})
				if err != nil {
					b.Error(err)
					return
				}
				if _, err := s.DetachDevice(b.Context(), guest, devs[0].ID); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
		// The process's CPU time per pair (the callers' and the
		// store's; PostgreSQL's own processes are not counted): on a
		// shared machine a steadier figure than the rate.
		b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
	})
}

// processCPU is the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchHosts makes n hosts of gpus GPUs split in slices each and returns
// their names.
func benchHosts(b *testing.B, s *store.Store, n, gpus, slices int) []string {
	b.Helper()
	var names []string
	for i := range n {
		h, err := s.CreateHost(b.Context(), api.Host{Name: fmt.Sprintf("bench-host-%d", i)})
		if err != nil {
			b.Fatal(err)
		}
		var devs []api.IsolatedDevice
		for g := range gpus {
			for k := range slices {
				devs = append(devs, api.IsolatedDevice{
					Name: fmt.Sprintf("mps-%d-%d", g, k), HostID: h.ID, DevType: api.DevTypeNvidiaMPS,
					Model: "NVIDIA H100 80GB HBM3", Addr: fmt.Sprintf("%02x:00.0-%d", g, k), VendorDeviceID: "10de:2330",
					DevicePath: fmt.Sprintf("GPU-%d-%d", i, g), NumaNode: g / 4, Index: -1, DeviceMinor: -1,
				})
			}
		}
		if _, err := s.CreateDevices(b.Context(), devs); err != nil {
			b.Fatal(err)
		}
		names = append(names, h.Name)
	}
	return names
}

// BenchmarkHostSync is the store's share of a host's sync (issue 41), one
// caller, on 500 hosts of 8 rows: "version" is what an unchanged sync
// costs (DevicesVersion), "page" what a full one lists (the host's first
// marker page, as client.SyncDevices asks it: 1000 rows, one host), and
// "token" a host token's verification, cached. cpu-us/op is the process's
// CPU time per call: on a shared machine a steadier figure than ns/op.
//
//	go test -run '^$' -bench HostSync -benchtime 20000x ./pkg/inventory/store
func BenchmarkHostSync(b *testing.B) {
	forEachBenchBackend(b, func(b *testing.B, s *store.Store) {
		hosts := benchHosts(b, s, 500, 2, 4)
		ids := make([]string, len(hosts))
		tokens := make([]string, len(hosts))
		for i, h := range hosts {
			hv, err := s.DevicesVersion(b.Context(), h)
			if err != nil {
				b.Fatal(err)
			}
			ids[i] = hv.HostID
			if tokens[i], _, err = s.CreateToken(b.Context(), store.NewToken{Role: store.RoleHost, Host: h}); err != nil {
				b.Fatal(err)
			}
			if _, err := s.VerifyToken(b.Context(), tokens[i]); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Analyze(b.Context()); err != nil {
			b.Fatal(err)
		}
		for _, op := range []struct {
			name string
			run  func(i int) error
		}{
			{"version", func(i int) error { _, err := s.DevicesVersion(b.Context(), ids[i]); return err }},
			{"page", func(i int) error {
				p, err := s.ListDevicesByMarker(b.Context(), store.DeviceFilter{HostID: ids[i], DevTypes: []string{api.DevTypeNvidiaMPS}, Limit: 1000}, "", false)
				if err == nil && len(p.Devices) != 8 {
					err = fmt.Errorf("%d devices", len(p.Devices))
				}
				return err
			}},
			{"token", func(i int) error { _, err := s.VerifyToken(b.Context(), tokens[i]); return err }},
		} {
			b.Run(op.name, func(b *testing.B) {
				cpu0 := processCPU(b)
				for i := 0; b.Loop(); i++ {
					if err := op.run(i % len(ids)); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/1000/float64(b.N), "cpu-us/op")
			})
		}
	})
}

// forEachBenchBackend runs f on a fresh store of each backend: SQLite in a
// temporary directory, and PostgreSQL where the tests have one (pgtest).
func forEachBenchBackend(b *testing.B, f func(b *testing.B, s *store.Store)) {
	for _, be := range []struct {
		name string
		dsn  func(testing.TB) string
	}{
		{"sqlite", func(tb testing.TB) string { return filepath.Join(tb.TempDir(), "inventory.db") }},
		{"postgres", pgtest.DSN},
	} {
		b.Run(be.name, func(b *testing.B) {
			s, err := store.Open(b.Context(), be.dsn(b), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			f(b, s)
		})
	}
}
