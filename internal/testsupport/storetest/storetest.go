// Package storetest runs inventory tests on every database backend: the
// same test body once on a SQLite file and once on a PostgreSQL database
// (see internal/testsupport/pgtest for where that comes from and when it is skipped).
// Packages using it call pgtest.Main from their TestMain.
package storetest

import (
	"path/filepath"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/pgtest"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// Backend is one database backend of the inventory.
type Backend struct {
	// Name is the subtest's name: "sqlite" or "postgres".
	Name string
	// DSN returns what store.Open takes for a new, empty database that
	// lives as long as t.
	DSN func(t testing.TB) string
}

// Backends lists the backends, SQLite first.
func Backends() []Backend {
	return []Backend{
		{Name: "sqlite", DSN: func(t testing.TB) string { return filepath.Join(t.TempDir(), "inventory.db") }},
		{Name: "postgres", DSN: pgtest.DSN},
	}
}

// ForEachBackend runs f once per backend, as subtests named after it.
// Within one run, open returns a new *store.Store on that run's database
// (made before f runs): call it twice for two pools on one database, as two
// mps-inventory processes have. The stores are closed when the subtest
// ends. open may be called from any goroutine (it reports
// a failure to open with t.Fatalf, so call it on the test's goroutine unless
// that is expected not to happen).
func ForEachBackend(t *testing.T, f func(t *testing.T, open func() *store.Store)) {
	t.Helper()
	for _, b := range Backends() {
		t.Run(b.Name, func(t *testing.T) {
			// Created here, on the test's goroutine: pgtest.DSN may skip.
			dsn := b.DSN(t)
			open := func() *store.Store {
				t.Helper()
				return Open(t, dsn)
			}
			f(t, open)
		})
	}
}

// Open opens the database dsn names (any DSN store.Open takes) and closes
// it when t ends.
func Open(t testing.TB, dsn string) *store.Store {
	t.Helper()
	s, err := store.Open(t.Context(), dsn, nil)
	if err != nil {
		t.Fatalf("opening %s: %v", store.RedactDSN(dsn), err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("closing the store: %v", err)
		}
	})
	return s
}

// Guests maps every device's addr to the guest holding it ("" when free),
// as stored.
func Guests(t testing.TB, st *store.Store) map[string]string {
	t.Helper()
	devs, _, err := st.ListDevices(t.Context(), store.DeviceFilter{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, d := range devs {
		m[d.Addr] = d.GuestID
	}
	return m
}
