// Package pgtest gives tests a fresh, empty PostgreSQL database.
//
// How to use it: in a package whose tests need PostgreSQL, add
// `func TestMain(m *testing.M) { pgtest.Main(m) }`, then call
// `pgtest.DSN(t)` for the DSN of a new database that is dropped when the
// test ends. Inventory tests rarely call it directly: internal/testsupport/storetest's
// `ForEachBackend(t, func(t *testing.T, open func() *store.Store))` runs a
// test once on SQLite and once on PostgreSQL (package store's own tests use
// their `forEachBackend`, the same thing without the import cycle). Where the
// server comes from: with MPS_TEST_POSTGRES_DSN set (CI sets it), that server,
// on which the tests may CREATE DATABASE; otherwise one private cluster per
// test process, started on first use from the PostgreSQL binaries of this
// machine (initdb and postgres, run as the `postgres` user when the tests run
// as root), listening on a unix socket in a temporary directory only, with
// fsync off, and stopped by Main when the tests are done. Without either the
// test is skipped, unless MPS_REQUIRE_POSTGRES=1 (CI): then it fails, so a
// CI run can never pass without having run PostgreSQL.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"yunion.io/x/mps-daemon/internal/testsupport/shared"
)

// The environment variables this package reads.
const (
	// EnvDSN names a PostgreSQL server (any database on it, as a user who may
	// create databases) to use instead of a private cluster.
	EnvDSN = "MPS_TEST_POSTGRES_DSN"
	// EnvRequire, set to 1, turns "PostgreSQL is not available" from a skip
	// into a failure.
	EnvRequire = "MPS_REQUIRE_POSTGRES"
	// EnvBin names the directory of initdb and postgres when they are
	// neither on PATH nor under /usr/lib/postgresql/<version>/bin.
	EnvBin = "MPS_TEST_POSTGRES_BIN"
)

// adminTimeout bounds creating or dropping a test database.
const adminTimeout = 60 * time.Second

// errUnavailable: this machine has no PostgreSQL to run (the test is
// skipped, or fails under MPS_REQUIRE_POSTGRES=1).
var errUnavailable = errors.New("PostgreSQL is not available")

// server is a PostgreSQL server the tests create their databases on.
type server struct {
	// admin is a pool on the server's maintenance database.
	admin *sql.DB
	// dsnFor returns the DSN of database name on this server.
	dsnFor func(name string) string
	// cluster is the private cluster behind it; nil for MPS_TEST_POSTGRES_DSN.
	cluster *cluster
}

func (s *server) close() error {
	err := s.admin.Close()
	if s.cluster != nil {
		err = errors.Join(err, s.cluster.stop())
	}
	return err
}

// process is the test process's one server, shared by every test of the
// binary and stopped by Main once they are done: MPS_TEST_POSTGRES_DSN's, or
// a private cluster.
var process = &shared.Resource[*server]{
	Name: "pgtest",
	Start: func() (*server, error) {
		if dsn := os.Getenv(EnvDSN); dsn != "" {
			return external(dsn)
		}
		return private()
	},
	Stop: func(s *server) error { return s.close() },
}

// Main runs the tests of a package (call it from TestMain) and stops the
// private cluster, if a test started one, before the process exits.
func Main(m *testing.M) {
	os.Exit(Run(m.Run))
}

// Run is Main for a TestMain that does more around m.Run: it calls run
// (which calls m.Run), stops the private cluster and returns run's code.
func Run(run func() int) int { return process.Run(run) }

// DSN returns the DSN of a new, empty database, dropped when t ends: a
// postgres:// URL (a key=value DSN when MPS_TEST_POSTGRES_DSN is one). Each
// call makes another database.
func DSN(t testing.TB) string {
	t.Helper()
	srv, err := serverFor(t)
	if err != nil {
		if errors.Is(err, errUnavailable) && os.Getenv(EnvRequire) != "1" {
			t.Skipf("%v (set %s=1 to make this a failure)", err, EnvRequire)
		}
		t.Fatalf("pgtest: %v", err)
	}
	name, err := randomName()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	if _, err := srv.admin.ExecContext(ctx, `CREATE DATABASE "`+name+`"`); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		defer cancel()
		if err := dropDatabase(ctx, srv.admin, name); err != nil {
			t.Errorf("pgtest: dropping database %s: %v", name, err)
		}
	})
	return srv.dsnFor(name)
}

// dropDatabase drops the database name, ending first the connections of
// its own role that a pool the test forgot to close left there.
//
// Not DROP DATABASE ... WITH (FORCE): that refuses outright when an
// autovacuum worker happens to be in the database, because a role that is
// no superuser (CI's mps_test) may not signal it ("must be a member of the
// role whose process is being terminated", SQLSTATE 42501; twice in 14 runs
// of pkg/inventory/server's TestRoleMatrix and TestConcurrentAttachDetach,
// scripts/flake-hunt.sh). A plain DROP DATABASE asks autovacuum to leave
// and waits for it and for the ended connections to go; a session that
// arrives in between (object_in_use, 55006) makes it try again until ctx
// ends.
func dropDatabase(ctx context.Context, admin *sql.DB, name string) error {
	for {
		_, err := admin.ExecContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = $1 AND usename = current_user AND pid <> pg_backend_pid()`, name)
		if err == nil {
			_, err = admin.ExecContext(ctx, `DROP DATABASE IF EXISTS "`+name+`"`)
		}
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" {
			return err
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// serverFor returns the process's server, connecting or starting it on
// first use (outside Main, a cluster of t's own: slower, but it can never
// outlive the process).
func serverFor(t testing.TB) (*server, error) { return process.Get(t) }

// external is the server of MPS_TEST_POSTGRES_DSN.
func external(dsn string) (*server, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvDSN, err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	admin := stdlib.OpenDB(*cfg)
	admin.SetMaxOpenConns(4)
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		_ = admin.Close()
		return nil, fmt.Errorf("connecting to %s: %w", EnvDSN, err)
	}
	dsnFor := func(name string) string { return withDatabase(dsn, name) }
	return &server{admin: admin, dsnFor: dsnFor}, nil
}

// private starts a cluster of this process's own.
func private() (*server, error) {
	c, err := startCluster()
	if err != nil {
		return nil, err
	}
	admin, err := sql.Open("pgx", c.dsn("postgres"))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("opening the admin pool: %w", err), c.stop())
	}
	admin.SetMaxOpenConns(4)
	return &server{admin: admin, dsnFor: c.dsn, cluster: c}, nil
}

// withDatabase returns dsn (a URL or key=value DSN) naming database name.
func withDatabase(dsn, name string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		if u, err := url.Parse(dsn); err == nil {
			u.Path, u.RawPath = "/"+name, ""
			return u.String()
		}
	}
	// In a key=value DSN the last of a repeated key wins.
	return dsn + " dbname=" + name
}

// randomName is a database name no other test uses: test_ and 16 hex digits.
func randomName() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("pgtest: random database name: %w", err)
	}
	return "test_" + hex.EncodeToString(b), nil
}
