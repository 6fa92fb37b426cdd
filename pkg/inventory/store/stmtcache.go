package store

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"
)

// SQLite parses a statement anew on every call database/sql makes without a
// prepared statement (the driver keeps none), and this store's statements
// are short, so the parse is expected to be a large share of running them
// (not measured separately; docs/benchmarks.md has the attach rates with
// the cache). The store therefore prepares each statement once on SQLite
// and runs it through prep. PostgreSQL's driver (pgx) already
// caches prepared statements per connection, so there prep does nothing.

// maxCachedStmts bounds the cache: the store has a few dozen statements
// (the list filters combine into a few more); past the bound, statements
// run unprepared.
const maxCachedStmts = 256

// stmtCache holds the statements prepared on the pool, by text. database/sql
// prepares each again, once, on every connection that runs it.
type stmtCache struct {
	db    *sql.DB
	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, stmts: map[string]*sql.Stmt{}}
}

// prepareWait bounds how long get waits for a connection of the pool to
// prepare a statement on (see get).
const prepareWait = 100 * time.Millisecond

// get returns query prepared, or nil when it cannot be (the caller then
// runs it as it is, and gets the error, if any, from there). It prepares
// on a connection of the pool, which may have none to give: on SQLite the
// pool is bounded (sqliteMaxConns), and a burst of transactions that each
// hold a connection may all ask for a statement not prepared yet. It
// therefore waits at most prepareWait, outside the cache's lock, and the
// statement runs unprepared that time.
func (c *stmtCache) get(ctx context.Context, query string) *sql.Stmt {
	c.mu.Lock()
	st, ok := c.stmts[query]
	full := c.stmts == nil || len(c.stmts) >= maxCachedStmts // closed, or full
	c.mu.Unlock()
	if ok {
		return st
	}
	if full {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, prepareWait)
	defer cancel()
	st, err := c.db.PrepareContext(pctx, query)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.stmts[query]; ok || c.stmts == nil || len(c.stmts) >= maxCachedStmts {
		// Prepared by another caller meanwhile, or closed, or full.
		_ = st.Close()
		return old
	}
	c.stmts[query] = st
	return st
}

func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, st := range c.stmts {
		errs = append(errs, st.Close())
	}
	c.stmts = nil
	return errors.Join(errs...)
}

// prep returns q (a *sql.Tx or the *sql.DB) running its statements
// prepared, on SQLite.
func (s *Store) prep(q querier) querier {
	if s.stmts == nil {
		return q
	}
	return preparedQuerier{c: s.stmts, q: q}
}

type preparedQuerier struct {
	c *stmtCache
	q querier
}

// stmt is query prepared for q: in q's transaction when q is one.
func (p preparedQuerier) stmt(ctx context.Context, query string) *sql.Stmt {
	st := p.c.get(ctx, query)
	if tx, ok := p.q.(*sql.Tx); ok && st != nil {
		// Closed with the transaction.
		return tx.StmtContext(ctx, st)
	}
	return st
}

func (p preparedQuerier) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := p.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return p.q.ExecContext(ctx, query, args...)
}

func (p preparedQuerier) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := p.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return p.q.QueryContext(ctx, query, args...)
}

func (p preparedQuerier) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := p.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return p.q.QueryRowContext(ctx, query, args...)
}
