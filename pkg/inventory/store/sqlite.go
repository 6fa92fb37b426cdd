package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

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
	// The isolation is the DSN's: BEGIN IMMEDIATE for writers (_txlock),
	// a WAL snapshot for readers.
	txOptions: func(readOnly bool) *sql.TxOptions { return &sql.TxOptions{ReadOnly: readOnly} },
	// A write transaction already holds the database's only write lock.
	forUpdate:     func(...string) string { return "" },
	migrationLock: func(context.Context, *sql.Tx) error { return nil },
	columnOf:      func(t reflect.Type) (string, error) { return columnDef(t, "TEXT", "INTEGER") },
}

// The pool: at most sqliteMaxConns connections, all of them kept open
// while in use (closed after sqliteConnMaxIdleTime unused). Enough for
// the concurrent readers of a busy inventory on a few cores (the writers
// share one, see groupcommit.go); a request past them waits for one to be
// handed back, which costs it less than opening a connection (its pragmas,
// reading the schema) and closing it after one statement: with 16 kept
// idle and no bound, a sync storm spent a fifth of the inventory's CPU
// opening connections (issue 41). A statement that must be prepared while
// every connection is taken waits a little, then runs unprepared
// (stmtCache.get).
const (
	sqliteMaxConns        = 32
	sqliteConnMaxIdleTime = 5 * time.Minute
)

// sqliteBusy reports whether err is SQLite's SQLITE_BUSY (the database
// locked by another connection past busy_timeout), in any of its extended
// forms.
func sqliteBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
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
	// Keep the connections that concurrent requests need open between
	// them: database/sql keeps 2 idle by default, and opening a SQLite
	// connection (its pragmas, reading the schema) cost more than the
	// token lookup it served when 8 clients authenticated at once
	// (docs/benchmarks.md, issue 22).
	db.SetMaxOpenConns(sqliteMaxConns)
	db.SetMaxIdleConns(sqliteMaxConns)
	db.SetConnMaxIdleTime(sqliteConnMaxIdleTime)
	s := &Store{db: db, d: sqliteDialect, log: log, now: time.Now, writers: make(chan struct{}, 1), stmts: newStmtCache(db), group: newGroupCommit(), tokens: newTokenCache()}
	if err := s.migrate(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("migrating %s: %w", path, err)
	}
	go s.runBatches()
	s.startUpkeep()
	return s, nil
}

// sqliteDSN builds a file: URI; the path is escaped so names holding '?' or
// '#' stay part of the path.
func sqliteDSN(path string) string {
	q := url.Values{}
	// busy_timeout first: switching a new file to WAL takes a lock, which
	// another process opening the same file at once may hold.
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	u := url.URL{Scheme: "file", Opaque: (&url.URL{Path: path}).EscapedPath(), RawQuery: q.Encode()}
	return u.String()
}
