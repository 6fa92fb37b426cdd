// Package store keeps the inventory's hosts and isolated devices in a SQL
// database: a SQLite file (pure Go, modernc.org/sqlite), the default for one
// inventory on one host, or PostgreSQL (pgx through database/sql), which
// several mps-inventory processes may serve at once. Every statement lives
// in this package behind methods; the few things that differ between the
// backends (placeholders, constraint errors, transaction options, row locks,
// the migration lock, the migration files) sit in a dialect value.
//
// What each backend relies on for concurrent writers:
//   - SQLite: one writer at a time. Every write transaction starts with
//     BEGIN IMMEDIATE, so a read-then-write inside it cannot interleave with
//     another writer; readers see a WAL snapshot. The writers of one process
//     queue in Go first (Store.writers), so only other processes meet
//     busy_timeout. Attaches and detaches that queue together share one
//     transaction and its fsync, each in a savepoint (groupcommit.go).
//   - PostgreSQL: READ COMMITTED, several writers at once, in this process
//     and in others. A read-then-write must therefore either lock what it
//     read (dialect.forUpdate: SELECT ... FOR UPDATE; UpdateHost, DeleteHost,
//     UpdateDevice), or be a conditional statement whose WHERE re-checks
//     what was read and whose row count is looked at (an UPDATE or DELETE
//     that also requires the guest_id it read: see alloc.go), or lean on a
//     unique constraint (a concurrent duplicate insert fails with 23505,
//     which becomes ErrDuplicate; a foreign key violation, 23503, becomes
//     ErrNotFound). Read-only transactions run REPEATABLE READ so a count
//     and its page come from one snapshot, as on SQLite. Migrations take a
//     transaction-scoped advisory lock (see migrate). The list totals'
//     counters (migration 0004) are written by a trigger in key order, and
//     every change of several devices is one statement (see DetachAll), so
//     their row locks are always taken in one order.
//
// Both backends get the same statements: the rules above hold on SQLite too
// (forUpdate is empty there, the single writer already gives the lock).
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Store is the inventory database. It is safe for concurrent use.
type Store struct {
	db  *sql.DB
	d   dialect
	log *slog.Logger
	// now is the clock for created_at/updated_at.
	now func() time.Time
	// writers, on SQLite, holds a token while a write transaction of this
	// Store runs: SQLite lets one writer in at a time anyway, and one that
	// finds the database locked polls it with growing sleeps (busy_timeout),
	// which under a few concurrent writers costs more than the writes. The
	// writers of this process queue here instead, and enter as soon as the
	// one before commits; busy_timeout is left for other processes. nil on
	// PostgreSQL, where writers run at once.
	writers chan struct{}
	// stmts are the prepared statements of prep (SQLite); nil on PostgreSQL.
	stmts *stmtCache
	// group is the queue of the writers that share transactions (SQLite,
	// groupcommit.go); nil on PostgreSQL.
	group *groupCommit
	// tokens are the tokens verified lately (tokencache.go), kept by
	// upkeep (tokens_upkeep.go).
	tokens *tokenCache
	upkeep *upkeep
	// revocationsMu: one reading of the revocation log at a time.
	revocationsMu sync.Mutex
	// pgHosts are the host ids PostgreSQL's attach sends its pick's
	// summary for before the host's lock answers (pgattach.go).
	pgHosts hostIDs
}

// dialect holds what differs between SQL backends.
type dialect struct {
	name string
	// migrations is rooted at the dialect's directory of NNNN_name.sql files.
	migrations fs.FS
	// bind rewrites a statement written with `?` placeholders for the backend.
	bind func(query string) string
	// constraint maps a driver error to ErrDuplicate (unique violation),
	// ErrNotFound (foreign key violation) or nil (anything else).
	constraint func(err error) error
	// txOptions are the options of a read-only or a read-write transaction.
	txOptions func(readOnly bool) *sql.TxOptions
	// forUpdate is the row-lock clause to append to a SELECT inside a write
	// transaction whose rows the transaction then changes: " FOR UPDATE OF
	// t1, t2" on PostgreSQL (only the named tables' rows are locked, so a
	// device's row can be locked without its host's), "" on SQLite. Tables
	// are the aliases or names used in FROM. Statements locking several
	// rows order them (ORDER BY seq or id) so two transactions take the
	// locks in the same order and cannot deadlock.
	forUpdate func(tables ...string) string
	// migrationLock is run first in each migration transaction; on
	// PostgreSQL it waits for the other processes migrating the same
	// database. SQLite's BEGIN IMMEDIATE is the lock there.
	migrationLock func(ctx context.Context, tx *sql.Tx) error
	// columnOf is the definition of a new column of a record field of
	// that type (addRecordColumns).
	columnOf func(reflect.Type) (string, error)
}

// txTimeout bounds one transaction (or one statement outside of one): the
// callers' contexts are request contexts that may carry no deadline, and a
// statement stuck behind a lock must not hold a connection of the pool
// forever. It is generous: it catches a hang, it does not shape latency.
const txTimeout = 30 * time.Second

// Open opens the database dsn names and brings its schema up to date:
//
//   - postgres://... or postgresql://... (a URL), or a key=value DSN such as
//     "host=/run/postgresql dbname=inventory": PostgreSQL, see OpenPostgres;
//   - sqlite://PATH, file:PATH or a plain PATH: a SQLite file, see OpenSQLite.
func Open(ctx context.Context, dsn string, log *slog.Logger) (*Store, error) {
	kind, target, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	if kind == "postgres" {
		return OpenPostgres(ctx, target, log)
	}
	return OpenSQLite(ctx, target, log)
}

// pgKeyword matches a libpq key=value connection string: its first word is
// one of the keys a PostgreSQL DSN starts with in practice.
var pgKeyword = regexp.MustCompile(`^\s*(host|hostaddr|port|dbname|user|password|sslmode|service|connect_timeout|application_name)\s*=`)

// ParseDSN tells which backend dsn is for ("sqlite" or "postgres") and what
// to hand it: the file path for SQLite, the DSN itself for PostgreSQL.
func ParseDSN(dsn string) (kind, target string, err error) {
	switch {
	case strings.TrimSpace(dsn) == "":
		return "", "", errors.New("opening database: empty DSN")
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"), pgKeyword.MatchString(dsn):
		return "postgres", dsn, nil
	case strings.HasPrefix(dsn, "sqlite://"):
		target = strings.TrimPrefix(dsn, "sqlite://")
	case strings.HasPrefix(dsn, "file://"):
		target = strings.TrimPrefix(dsn, "file://")
	case strings.HasPrefix(dsn, "file:"):
		target = strings.TrimPrefix(dsn, "file:")
	default:
		target = dsn
	}
	if target == "" {
		return "", "", fmt.Errorf("opening database %q: no file path", dsn)
	}
	return "sqlite", target, nil
}

// RedactDSN returns dsn with any password replaced by "xxxxx", for logs.
func RedactDSN(dsn string) string {
	kind, _, err := ParseDSN(dsn)
	if err != nil || kind != "postgres" {
		return dsn
	}
	return redactPostgresDSN(dsn)
}

// Dialect is the backend's name: "sqlite" or "postgres".
func (s *Store) Dialect() string { return s.d.name }

// Close closes the database.
func (s *Store) Close() error {
	s.stopUpkeep()
	if s.group != nil {
		s.group.stop()
	}
	if s.stmts != nil {
		if err := s.stmts.close(); err != nil {
			return fmt.Errorf("closing prepared statements: %w", err)
		}
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("closing database: %w", err)
	}
	return nil
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, txTimeout)
	defer cancel()
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("pinging database: %w", err)
	}
	return nil
}

// querier is what both *sql.DB and *sql.Tx offer.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// inTx runs fn in a transaction bounded by txTimeout. Read-only transactions
// see one snapshot (SQLite: a plain BEGIN on WAL; PostgreSQL: REPEATABLE
// READ, READ ONLY); the others are SQLite's BEGIN IMMEDIATE (the DSN asks
// for it) or PostgreSQL's READ COMMITTED (see the package comment for what
// write paths must do there).
func (s *Store) inTx(ctx context.Context, readOnly bool, fn func(tx *sql.Tx) error) error {
	return s.inTxWithin(ctx, txTimeout, readOnly, fn)
}

// inTxWithin is inTx with another bound than txTimeout.
func (s *Store) inTxWithin(ctx context.Context, timeout time.Duration, readOnly bool, fn func(tx *sql.Tx) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !readOnly && s.writers != nil {
		select {
		case s.writers <- struct{}{}:
			defer func() { <-s.writers }()
		case <-ctx.Done():
			return fmt.Errorf("waiting for the other writers: %w", ctx.Err())
		}
	}
	tx, err := s.begin(ctx, readOnly)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing transaction: %w", err)
	}
	return nil
}

// begin starts a transaction for inTx and the group commit. On SQLite a
// writer that finds another process's writer holding the lock polls it for
// busy_timeout, then fails with SQLITE_BUSY; a second process's writers,
// handing the lock to each other as soon as one commits, can keep it that
// long. Nothing has run in the transaction then, so it is begun again,
// each try waiting busy_timeout again, until ctx ends.
func (s *Store) begin(ctx context.Context, readOnly bool) (*sql.Tx, error) {
	for {
		tx, err := s.db.BeginTx(ctx, s.d.txOptions(readOnly))
		if err == nil {
			return tx, nil
		}
		if readOnly || !sqliteBusy(err) || ctx.Err() != nil {
			return nil, fmt.Errorf("beginning transaction: %w", err)
		}
		s.log.Debug("database locked by another writer past busy_timeout; beginning again", "err", err)
	}
}

// timestamp is the current time as stored: UTC, microseconds (the finest
// precision PostgreSQL keeps, so both backends return the same value).
func (s *Store) timestamp() time.Time {
	return s.now().UTC().Truncate(time.Microsecond)
}

func mustSub(fsys fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(fmt.Sprintf("embedded migrations %s: %v", dir, err))
	}
	return sub
}
