package store

import (
	"path/filepath"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/pgtest"
)

// TestMain shares one PostgreSQL server among the package's tests and stops
// it at the end (see internal/testsupport/pgtest).
func TestMain(m *testing.M) { pgtest.Main(m) }

// forEachBackend runs f once on a new SQLite file and once on a new
// PostgreSQL database, as subtests "sqlite" and "postgres". open returns a
// new Store on the subtest's database: call it twice for two pools on one
// database (two mps-inventory processes). It is
// internal/testsupport/storetest.ForEachBackend for this package, which that one
// imports.
func forEachBackend(t *testing.T, f func(t *testing.T, open func() *Store)) {
	t.Helper()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			dsn := b.dsn(t)
			f(t, func() *Store {
				t.Helper()
				return openDSN(t, dsn)
			})
		})
	}
}

// backend is a database backend: its name and how to get the DSN of a new,
// empty database that lives as long as a test.
type backend struct {
	name string
	dsn  func(testing.TB) string
}

func backends() []backend {
	return []backend{
		{"sqlite", func(t testing.TB) string { return filepath.Join(t.TempDir(), "db", "inventory.db") }},
		{"postgres", pgtest.DSN},
	}
}

// openDSN opens dsn with Open and closes the store when t ends.
func openDSN(t testing.TB, dsn string) *Store {
	t.Helper()
	s, err := Open(t.Context(), dsn, nil)
	if err != nil {
		t.Fatalf("Open(%s): %v", RedactDSN(dsn), err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("closing the store: %v", err)
		}
	})
	return s
}
