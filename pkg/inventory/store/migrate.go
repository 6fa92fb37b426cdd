package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// migrationFiles holds the schema, one directory per dialect. Files are
// named NNNN_what.sql and applied in order; a file, once released, never
// changes: a schema change is a new file.
//
//go:embed migrations
var migrationFiles embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

var migrationName = regexp.MustCompile(`^(\d{4})_[a-z0-9_]+\.sql$`)

// loadMigrations reads the NNNN_name.sql files of fsys's root. Versions must
// run 1, 2, 3... without gaps, so a missing file is noticed at build time
// (the tests load the embedded set) rather than on a user's database.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("reading migrations: %w", err)
	}
	var ms []migration
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %s: name is not NNNN_name.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1]) // four digits, cannot fail
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("reading migration %s: %w", e.Name(), err)
		}
		ms = append(ms, migration{version: v, name: path.Base(e.Name()), sql: string(body)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: expected version %04d", m.name, i+1)
		}
	}
	return ms, nil
}

// migrationTimeout bounds one migration, waiting for the lock included: a
// schema change may rewrite or index every row of a large table.
const migrationTimeout = 10 * time.Minute

// migrate applies the migrations the database lacks, each in its own
// transaction together with its schema_migrations row, so a crash leaves the
// schema at a known version. Opening an up-to-date database changes nothing.
// Then the columns of record fields the database lacks are added
// (addRecordColumns): a new field of the record needs no file here.
//
// Several processes may open one database at once (mps-inventory processes
// sharing a PostgreSQL database start together). Each transaction therefore
// takes the dialect's migration lock first, and only then creates
// schema_migrations (CREATE TABLE IF NOT EXISTS itself races on
// PostgreSQL), reads the version and applies the next file: a process that
// waited on the lock sees what the other applied and skips it.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := loadMigrations(s.d.migrations)
	if err != nil {
		return err
	}
	for {
		var applied *migration
		err := s.inTxWithin(ctx, migrationTimeout, false, func(tx *sql.Tx) error {
			if err := s.d.migrationLock(ctx, tx); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
				version    INTEGER PRIMARY KEY,
				name       TEXT NOT NULL,
				applied_at TEXT NOT NULL)`); err != nil {
				return fmt.Errorf("creating schema_migrations: %w", err)
			}
			current, err := s.schemaVersion(ctx, tx)
			if err != nil {
				return err
			}
			if current > len(ms) {
				return fmt.Errorf("%w: database is at version %d, this binary knows up to %d; use a newer mps-inventory",
					ErrSchemaTooNew, current, len(ms))
			}
			if current == len(ms) {
				return nil
			}
			m := ms[current]
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %s: applying: %w", m.name, err)
			}
			_, err = tx.ExecContext(ctx, s.d.bind(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`),
				m.version, m.name, formatTime(s.timestamp()))
			if err != nil {
				return fmt.Errorf("migration %s: recording: %w", m.name, err)
			}
			applied = &m
			return nil
		})
		if err != nil {
			return err
		}
		if applied == nil {
			return s.addRecordColumns(ctx)
		}
		s.log.Info("applied database migration", "version", applied.version, "name", applied.name, "dialect", s.d.name)
	}
}

func (s *Store) schemaVersion(ctx context.Context, q querier) (int, error) {
	var v int
	if err := q.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("reading schema version: %w", err)
	}
	return v, nil
}

// timeLayout is how timestamps are stored as text: UTC with a fixed number of
// fraction digits, so the text sorts in time order.
const timeLayout = "2006-01-02T15:04:05.000000Z"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// dbTime scans a timestamp column whether the driver hands over text (SQLite)
// or a time.Time (PostgreSQL).
type dbTime struct{ t time.Time }

func (d *dbTime) Scan(src any) error {
	switch v := src.(type) {
	case time.Time:
		d.t = v.UTC()
		return nil
	case string:
		return d.parse(v)
	case []byte:
		return d.parse(string(v))
	}
	return fmt.Errorf("scanning timestamp: unsupported type %T", src)
}

func (d *dbTime) parse(s string) error {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("scanning timestamp: %w", err)
	}
	d.t = t.UTC()
	return nil
}
