package pgtest

import (
	"database/sql"
	"os"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

func query(t *testing.T, dsn, q string, args ...any) string {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v string
	if err := db.QueryRowContext(t.Context(), q, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

// Each DSN is a database of its own, empty, and gone after its test.
func TestDSNIsAFreshDatabaseDroppedAtTheEnd(t *testing.T) {
	var first, name string
	t.Run("use", func(t *testing.T) {
		first = DSN(t)
		second := DSN(t)
		name = query(t, first, `SELECT current_database()`)
		if other := query(t, second, `SELECT current_database()`); other == name {
			t.Fatalf("two DSNs name one database %s", name)
		}
		if n := query(t, first, `SELECT count(*)::text FROM pg_tables WHERE schemaname = 'public'`); n != "0" {
			t.Errorf("new database has %s tables, want none", n)
		}
		db, err := sql.Open("pgx", first)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.ExecContext(t.Context(), `CREATE TABLE t (x int)`); err != nil {
			t.Fatal(err)
		}
	})
	if t.Skipped() || name == "" {
		return
	}
	// The databases are dropped; ask the server through a third one.
	if n := query(t, DSN(t), `SELECT count(*)::text FROM pg_database WHERE datname = $1`, name); n != "0" {
		t.Errorf("database %s still exists after its test", name)
	}
}

// The private cluster takes no TCP connections: only its unix socket in a
// directory of its own.
func TestPrivateClusterListensOnNoTCPPort(t *testing.T) {
	if os.Getenv(EnvDSN) != "" {
		t.Skipf("%s is set: no private cluster", EnvDSN)
	}
	dsn := DSN(t)
	if got := query(t, dsn, `SHOW listen_addresses`); got != "" {
		t.Errorf("listen_addresses = %q, want none", got)
	}
	if got := query(t, dsn, `SHOW fsync`); got != "off" {
		t.Errorf("fsync = %q, want off", got)
	}
}

func TestWithDatabase(t *testing.T) {
	tests := []struct{ dsn, want string }{
		{"postgres://u:p@db:5432/postgres?sslmode=disable", "postgres://u:p@db:5432/test_1?sslmode=disable"},
		{"postgresql://u@db", "postgresql://u@db/test_1"},
		{"postgres:///x?host=/run/postgresql", "postgres:///test_1?host=/run/postgresql"},
		{"host=db user=u dbname=postgres", "host=db user=u dbname=postgres dbname=test_1"},
	}
	for _, tt := range tests {
		t.Run(tt.dsn, func(t *testing.T) {
			if got := withDatabase(tt.dsn, "test_1"); got != tt.want {
				t.Errorf("withDatabase = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRandomNamesDiffer(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		n, err := randomName()
		if err != nil {
			t.Fatal(err)
		}
		if seen[n] || len(n) != len("test_")+16 {
			t.Fatalf("name %q repeated or malformed", n)
		}
		seen[n] = true
	}
}

// A pool the test forgot to close does not keep its database: the drop at
// the test's end ends the pool's connections first.
func TestForgottenPoolDoesNotKeepTheDatabase(t *testing.T) {
	var name string
	var forgotten *sql.DB
	defer func() {
		if forgotten != nil {
			forgotten.Close()
		}
	}()
	t.Run("use", func(t *testing.T) {
		dsn := DSN(t)
		name = query(t, dsn, `SELECT current_database()`)
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		forgotten = db
		if err := db.PingContext(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
	if t.Skipped() || name == "" {
		return
	}
	if n := query(t, DSN(t), `SELECT count(*)::text FROM pg_database WHERE datname = $1`, name); n != "0" {
		t.Errorf("database %s, with a connection still open in it, outlived its test", name)
	}
}
