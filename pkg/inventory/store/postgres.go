package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/stdlib"
)

// The pool's limits. Every mps-inventory process has its own pool, so a
// cluster of N processes holds up to N*pgMaxOpenConns connections: 20 keeps
// four processes within PostgreSQL's default max_connections of 100 (with
// room for operators). Every connection opened is kept while it is used
// (pgMaxIdleConns = pgMaxOpenConns): a connection is a new backend process
// of PostgreSQL, and with 10 kept idle a burst of host syncs past them
// opened and closed one per request, PostgreSQL's CPU going to forking
// backends (issue 41). Connections are recycled so a failover or a
// pgbouncer restart is followed within minutes.
const (
	pgMaxOpenConns    = 20
	pgMaxIdleConns    = pgMaxOpenConns
	pgConnMaxLifetime = 30 * time.Minute
	pgConnMaxIdleTime = 5 * time.Minute
	pgConnectTimeout  = 10 * time.Second
)

// pgSessionDefaults are set on every connection unless the DSN sets them:
// the server-side bound on one statement (the client side is the context,
// see txTimeout) and on a transaction left idle by a client that died
// without closing it, so neither holds row locks forever.
var pgSessionDefaults = map[string]string{
	"application_name":                    "mps-inventory",
	"statement_timeout":                   "30s",
	"idle_in_transaction_session_timeout": "60s",
}

// migrationLockKey is the pg_advisory_xact_lock key that serialises
// migrations of one database: any fixed number, the same in every binary
// ("mps-inv" in ASCII).
const migrationLockKey int64 = 0x6d70732d696e76

var postgresDialect = dialect{
	name:       "postgres",
	migrations: mustSub(migrationFiles, "migrations/postgres"),
	bind:       bindDollar,
	constraint: func(err error) error {
		var pe *pgconn.PgError
		if !errors.As(err, &pe) {
			return nil
		}
		switch pe.Code {
		case "23505": // unique_violation
			return ErrDuplicate
		case "23503": // foreign_key_violation
			return ErrNotFound
		}
		return nil
	},
	txOptions: func(readOnly bool) *sql.TxOptions {
		if readOnly {
			return &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead}
		}
		return &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	},
	forUpdate: func(tables ...string) string {
		if len(tables) == 0 {
			return " FOR UPDATE"
		}
		return " FOR UPDATE OF " + strings.Join(tables, ", ")
	},
	migrationLock: func(ctx context.Context, tx *sql.Tx) error {
		// A migration may run longer than the session's statement_timeout
		// (an index over a million rows); migrationTimeout bounds it instead.
		if _, err := tx.ExecContext(ctx, `SET LOCAL statement_timeout = 0`); err != nil {
			return fmt.Errorf("lifting the statement timeout for migrating: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockKey); err != nil {
			return fmt.Errorf("taking the migration lock: %w", err)
		}
		return nil
	},
	columnOf: func(t reflect.Type) (string, error) { return columnDef(t, `TEXT COLLATE "C"`, "BOOLEAN") },
}

// OpenPostgres connects to the PostgreSQL database dsn names (a
// postgres:// URL or a key=value DSN, as libpq takes them) and brings its
// schema up to date. Several processes may open one database at once: the
// migrations take a lock, and the store's writes are safe under READ
// COMMITTED (see the package comment).
func OpenPostgres(ctx context.Context, dsn string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's message names the DSN with its password masked.
		return nil, fmt.Errorf("parsing postgres DSN: %w", err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = pgConnectTimeout
	}
	for k, v := range pgSessionDefaults {
		if _, set := cfg.RuntimeParams[k]; !set {
			cfg.RuntimeParams[k] = v
		}
	}
	cfg.BuildContextWatcherHandler = cancelLate
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(pgMaxOpenConns)
	db.SetMaxIdleConns(pgMaxIdleConns)
	db.SetConnMaxLifetime(pgConnMaxLifetime)
	db.SetConnMaxIdleTime(pgConnMaxIdleTime)
	where := fmt.Sprintf("postgres database %q on %s", cfg.Database, cfg.Host)
	s := &Store{db: db, d: postgresDialect, log: log, now: time.Now, tokens: newTokenCache()}
	if err := s.Ping(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("connecting to %s: %w", where, err)
	}
	if err := s.migrate(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("migrating %s: %w", where, err)
	}
	s.startUpkeep()
	return s, nil
}

// A statement whose context ends (a client that hung up, a request that
// timed out) is cancelled late: pgx's default sets a deadline on the
// connection at once, which breaks it, and the pool then opens a new one
// (PostgreSQL forks a backend); an overloaded inventory whose clients
// time out then spent more of PostgreSQL's CPU opening connections than
// answering (issue 41: 81 s of it in 140 s). A statement still running
// pgCancelAfter later is cancelled with a cancel request, which keeps the
// connection; the deadline follows pgCancelDeadline later still.
const (
	pgCancelAfter    = time.Second
	pgCancelDeadline = 3 * time.Second
)

func cancelLate(c *pgconn.PgConn) ctxwatch.Handler {
	return &pgconn.CancelRequestContextWatcherHandler{Conn: c, CancelRequestDelay: pgCancelAfter, DeadlineDelay: pgCancelDeadline}
}

// bindDollar turns the `?` placeholders of q into $1, $2, ... in order. A
// `?` inside a string literal ('...'), a quoted identifier ("...") or a
// comment is text, not a placeholder, and is left alone.
func bindDollar(q string) string {
	if !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c == '\'' || c == '"':
			// Copy through the closing quote; a doubled quote inside ('it''s')
			// closes and reopens, which copies the same bytes.
			end := strings.IndexByte(q[i+1:], c)
			if end < 0 {
				b.WriteString(q[i:])
				return b.String()
			}
			b.WriteString(q[i : i+end+2])
			i += end + 1
		case c == '-' && i+1 < len(q) && q[i+1] == '-':
			end := strings.IndexByte(q[i:], '\n')
			if end < 0 {
				b.WriteString(q[i:])
				return b.String()
			}
			b.WriteString(q[i : i+end+1])
			i += end
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			end := strings.Index(q[i+2:], "*/")
			if end < 0 {
				b.WriteString(q[i:])
				return b.String()
			}
			b.WriteString(q[i : i+end+4])
			i += end + 3
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

var pgPasswordKeyword = regexp.MustCompile(`(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// redactPostgresDSN masks the password of a URL or key=value DSN.
func redactPostgresDSN(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "postgres://(unparsable DSN)"
		}
		if q := u.Query(); q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.Redacted()
	}
	return pgPasswordKeyword.ReplaceAllString(dsn, "${1}xxxxx")
}
