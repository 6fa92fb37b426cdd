// Package storetest runs inventory tests on every database backend: the
// same test body once on a SQLite file and once on a PostgreSQL database
// (see internal/testsupport/pgtest for where that comes from and when it is skipped).
// Packages using it call pgtest.Main from their TestMain.
package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

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
		{Name: "sqlite", DSN: SQLiteDSN},
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

// SQLiteDSN returns the path of a new SQLite inventory database, empty
// and migrated, that lives as long as t: a copy of one this test process
// migrated once. Migrating a new file costs about 290 ms under -race (28
// ms without: modernc's SQLite is C translated to Go, and the race
// detector instruments every access of it), and the inventory's tests
// open a new database for most of their subtests, hundreds in all
// (docs/testing.md). The copy is what store.Open made of an empty file, byte for
// byte; the store's own tests still migrate new files themselves.
func SQLiteDSN(t testing.TB) string {
	t.Helper()
	b, err := sqliteTemplate()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "inventory.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatalf("copying the migrated database: %v", err)
	}
	return path
}

// sqliteTemplate returns the bytes of an empty migrated SQLite database,
// made by the first test that asks (computed once per process, never
// changed: every copy is the same).
var sqliteTemplate = sync.OnceValues(migratedSQLite)

// migratedSQLite migrates a new SQLite file and returns its bytes once the
// store has closed it (the WAL checkpointed into the file and removed).
func migratedSQLite() ([]byte, error) {
	dir, err := os.MkdirTemp("", "mps-storetest-")
	if err != nil {
		return nil, fmt.Errorf("making the template database's directory: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "inventory.db")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := store.OpenSQLite(ctx, path, nil)
	if err != nil {
		return nil, fmt.Errorf("migrating the template database: %w", err)
	}
	if err := s.Close(); err != nil {
		return nil, fmt.Errorf("closing the template database: %w", err)
	}
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("the template database's WAL outlived its close (%v): its file alone is not the database", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the template database: %w", err)
	}
	return b, nil
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

// Exec runs query on the database dsn names through a connection of its
// own, not a Store's: an operator's statement typed in psql or sqlite3,
// behind the inventory's back.
func Exec(t testing.TB, dsn, query string, args ...any) {
	t.Helper()
	kind, target, err := store.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	driver, source := "pgx", target
	if kind == "sqlite" {
		driver, source = "sqlite", "file:"+target+"?_pragma=busy_timeout(10000)"
	}
	db, err := sql.Open(driver, source)
	if err != nil {
		t.Fatalf("opening %s: %v", store.RedactDSN(dsn), err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}
