package store

import (
	"context"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/pgtest"
)

func TestParseDSN(t *testing.T) {
	tests := []struct {
		dsn, kind, target, wantErr string
	}{
		{"/var/lib/yunion-mps/inventory.db", "sqlite", "/var/lib/yunion-mps/inventory.db", ""},
		{"inventory.db", "sqlite", "inventory.db", ""},
		{"sqlite:///var/lib/inv.db", "sqlite", "/var/lib/inv.db", ""},
		{"sqlite://rel/inv.db", "sqlite", "rel/inv.db", ""},
		{"file:/var/lib/inv.db", "sqlite", "/var/lib/inv.db", ""},
		{"file:///var/lib/inv.db", "sqlite", "/var/lib/inv.db", ""},
		// '=' in a path is a path: no DSN keyword at its start.
		{"/data/a=b.db", "sqlite", "/data/a=b.db", ""},
		{"postgres://u:p@db:5432/inv?sslmode=disable", "postgres", "postgres://u:p@db:5432/inv?sslmode=disable", ""},
		{"postgresql://db/inv", "postgres", "postgresql://db/inv", ""},
		{"host=/run/postgresql dbname=inv", "postgres", "host=/run/postgresql dbname=inv", ""},
		{"dbname=inv user=mps", "postgres", "dbname=inv user=mps", ""},
		{"", "", "", "empty DSN"},
		{"   ", "", "", "empty DSN"},
		{"sqlite://", "", "", "no file path"},
	}
	for _, tt := range tests {
		t.Run(tt.dsn, func(t *testing.T) {
			kind, target, err := ParseDSN(tt.dsn)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || kind != tt.kind || target != tt.target {
				t.Errorf("ParseDSN = %q, %q, %v; want %q, %q", kind, target, err, tt.kind, tt.target)
			}
		})
	}
}

// Open picks the backend from the DSN; a SQLite DSN form lands on the file
// its path names.
func TestOpenSQLiteDSNForms(t *testing.T) {
	for _, form := range []string{"", "sqlite://", "file:"} {
		t.Run(form+"PATH", func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "inv.db")
			s := openDSN(t, form+path)
			if s.Dialect() != "sqlite" {
				t.Errorf("dialect %s, want sqlite", s.Dialect())
			}
			mustHost(t, s, "h")
			again := openDSN(t, path)
			if _, err := again.GetHost(t.Context(), "h"); err != nil {
				t.Errorf("the host written through %q is not in %s: %v", form+path, path, err)
			}
		})
	}
}

func TestBindDollar(t *testing.T) {
	tests := []struct{ in, want string }{
		{`SELECT 1`, `SELECT 1`},
		{`SELECT a FROM t WHERE x = ? AND y = ?`, `SELECT a FROM t WHERE x = $1 AND y = $2`},
		{`INSERT INTO t VALUES (?,?,?)`, `INSERT INTO t VALUES ($1,$2,$3)`},
		{`SELECT '?' FROM t WHERE x = ?`, `SELECT '?' FROM t WHERE x = $1`},
		{`SELECT 'it''s ?' , ? `, `SELECT 'it''s ?' , $1 `},
		{`SELECT "odd?col" FROM t WHERE x = ?`, `SELECT "odd?col" FROM t WHERE x = $1`},
		{"SELECT x -- why?\nFROM t WHERE y = ?", "SELECT x -- why?\nFROM t WHERE y = $1"},
		{`SELECT /* ? */ x FROM t WHERE y = ?`, `SELECT /* ? */ x FROM t WHERE y = $1`},
		{`WHERE a = ? LIMIT ? OFFSET ?`, `WHERE a = $1 LIMIT $2 OFFSET $3`},
		{`SELECT 'unterminated ?`, `SELECT 'unterminated ?`},
		{`SELECT ? -- trailing ?`, `SELECT $1 -- trailing ?`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := bindDollar(tt.in); got != tt.want {
				t.Errorf("bindDollar(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestRedactDSN(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://mps:s3cret@db/inv", "postgres://mps:xxxxx@db/inv"},
		{"postgres://db/inv?user=mps&password=s3cret", "postgres://db/inv?password=xxxxx&user=mps"},
		{"host=db password=s3cret dbname=inv", "host=db password=xxxxx dbname=inv"},
		{"host=db password='s3 cret' dbname=inv", "host=db password=xxxxx dbname=inv"},
		{"/var/lib/inv.db", "/var/lib/inv.db"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := RedactDSN(tt.in); got != tt.want {
				t.Errorf("RedactDSN = %q, want %q", got, tt.want)
			}
		})
	}
}

// A PostgreSQL store bounds its pool and every statement; a DSN may set its
// own session settings, which win.
func TestPostgresPoolAndSessionDefaults(t *testing.T) {
	dsn := pgtest.DSN(t)
	show := func(s *Store, setting string) string {
		t.Helper()
		var v string
		if err := s.db.QueryRowContext(t.Context(), "SHOW "+setting).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	s := openDSN(t, dsn)
	if got := s.db.Stats().MaxOpenConnections; got != pgMaxOpenConns {
		t.Errorf("pool allows %d connections, want %d", got, pgMaxOpenConns)
	}
	for setting, want := range map[string]string{
		"statement_timeout": "30s", "idle_in_transaction_session_timeout": "1min", "application_name": "mps-inventory",
	} {
		if got := show(s, setting); got != want {
			t.Errorf("%s = %q, want %q", setting, got, want)
		}
	}
	withSettings := dsn + " statement_timeout=5s application_name=mine"
	if u, err := url.Parse(dsn); err == nil && strings.HasPrefix(dsn, "postgres") {
		q := u.Query()
		q.Set("statement_timeout", "5s")
		q.Set("application_name", "mine")
		u.RawQuery = q.Encode()
		withSettings = u.String()
	}
	own := openDSN(t, withSettings)
	if got := show(own, "statement_timeout") + " " + show(own, "application_name"); got != "5s mine" {
		t.Errorf("the DSN's settings: %q, want \"5s mine\"", got)
	}
}

// A statement whose context ends keeps its connection: a short one
// finishes, a long one gets a cancel request (not a broken connection,
// which the pool would replace with a new backend, PostgreSQL's fork).
func TestPostgresCancelKeepsTheConnection(t *testing.T) {
	s := openDSN(t, pgtest.DSN(t))
	ctx := t.Context()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pid := func() int {
		t.Helper()
		var p int
		if err := conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&p); err != nil {
			t.Fatalf("the connection after a cancelled statement: %v", err)
		}
		return p
	}
	before := pid()
	long, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := conn.ExecContext(long, `SELECT pg_sleep(10)`); err == nil {
		t.Fatal("a 10 s statement whose context ended after 10 ms succeeded")
	}
	if after := pid(); after != before {
		t.Errorf("backend %d after the cancelled statements, %d before: the connection was replaced", after, before)
	}
}
