// Package store keeps the inventory's hosts and isolated devices in a SQL
// database. SQLite (pure Go, modernc.org/sqlite) is the backend today; every
// statement lives in this package behind methods, and the few things that
// differ between SQL dialects (placeholders, constraint errors, migrations)
// sit in a dialect value, so a PostgreSQL backend can be added beside it.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Store is the inventory database. It is safe for concurrent use.
type Store struct {
	db  *sql.DB
	d   dialect
	log *slog.Logger
	// now is the clock for created_at/updated_at.
	now func() time.Time
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
}

var sqliteDialect = dialect{
	name:       "sqlite",
	migrations: mustSub(migrationFiles, "migrations/sqlite"),
	bind:       func(q string) string { return q },
	constraint: func(err error) error {
		var se *sqlite.Error
		if !errors.As(err, &se) {
			return nil
		}
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return ErrDuplicate
		case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
			return ErrNotFound
		}
		return nil
	},
}

// OpenSQLite opens (creating when missing) the SQLite database at path and
// brings its schema up to date. The database runs in WAL mode so readers never
// wait for the writer, and every write transaction starts with BEGIN IMMEDIATE
// so two writers queue on busy_timeout instead of failing with SQLITE_BUSY
// halfway through.
func OpenSQLite(ctx context.Context, path string, log *slog.Logger) (*Store, error) {
	if path == "" {
		return nil, errors.New("opening sqlite database: empty path")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("creating directory of %s: %w", path, err)
	}
	db, err := sql.Open("sqlite", sqliteDSN(path))
	if err != nil {
		return nil, fmt.Errorf("opening sqlite database %s: %w", path, err)
	}
	s := &Store{db: db, d: sqliteDialect, log: log, now: time.Now}
	if err := s.migrate(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("migrating %s: %w", path, err)
	}
	return s, nil
}

// sqliteDSN builds a file: URI; the path is escaped so names holding '?' or
// '#' stay part of the path.
func sqliteDSN(path string) string {
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	u := url.URL{Scheme: "file", Opaque: (&url.URL{Path: path}).EscapedPath(), RawQuery: q.Encode()}
	return u.String()
}

// Close closes the database.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("closing database: %w", err)
	}
	return nil
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
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

// inTx runs fn in a transaction. Read-only transactions start with a plain
// BEGIN (a WAL snapshot that takes no write lock); the others with BEGIN
// IMMEDIATE, as the DSN asks.
func (s *Store) inTx(ctx context.Context, readOnly bool, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: readOnly})
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
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
