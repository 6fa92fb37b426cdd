package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
)

// Group commit (SQLite). SQLite has one writer at a time, and every commit
// waits for an fsync of the WAL (synchronous=FULL): with one transaction per
// request, concurrent attaches and detaches queue on that fsync, not on
// their statements (docs/benchmarks.md, issue 22). The writers of attach and
// detach therefore share transactions: a request queues its work; the
// Store's batch goroutine (runBatches, below), holding the write token
// (Store.writers), takes every queued request, runs each in a SAVEPOINT of
// one transaction, commits once (one fsync), and only then tells each
// request how it went. So:
//
//   - an answer still means committed: no request hears "done" before the
//     COMMIT that holds its change has returned (a kill -9 after the answer
//     loses nothing, as with a transaction per request);
//   - a request that fails rolls back to its savepoint: its neighbours in
//     the batch keep their changes and are committed;
//   - a batch that cannot go on (the savepoint itself fails: SQLite rolled
//     back the whole transaction, as it does on a full disk or an I/O
//     error) or whose COMMIT fails answers that error to every request in
//     it that had succeeded; the requests it had not run yet go back to the
//     queue, unrun;
//   - the requests run one after the other, as before, in one connection:
//     each sees the ones before it in the batch (the single-writer rules of
//     store.go hold unchanged);
//   - a request's statements run under the batch's context, never under the
//     client's: a client going away must not interrupt a statement of the
//     shared transaction (SQLite rolls the whole transaction back on
//     interrupt). A request whose context ends while it waits in the queue
//     is taken out unrun; once a batch has taken it, its answer is the
//     batch's.
//
// Nothing waits to fill a batch: a batch is whatever queued while the
// previous one ran, so a lone writer commits at once.
//
// The batches run on one goroutine of the Store's own (runBatches), not on
// a request's: it goes from one batch to the next while requests are
// queued, where a request's goroutine leading a batch handed the write
// token to the next request's goroutine after each one, which then had to
// be scheduled before anything ran; with 2 vCPUs the writer stood idle
// 15-17% of the time (docs/benchmarks.md, issue 22, round 5). Close stops
// it after the batch it runs; requests still queued then, and later ones,
// are answered ErrClosed, unrun.

// maxBatch bounds the requests of one transaction, so that one batch does
// not hold the write lock (and its requests' answers) for long.
const maxBatch = 64

// groupJob is one request's work in the queue.
type groupJob struct {
	ctx  context.Context
	fn   func(ctx context.Context, tx *sql.Tx) error
	done chan error // buffered: the batch goroutine never waits on it
}

// ErrClosed answers a write sent to a Store being closed.
var ErrClosed = errors.New("the inventory's database is closed")

// errWritePanicked answers a write whose work panicked (runJob).
var errWritePanicked = errors.New("the write failed on an internal error (logged)")

// groupCommit is the queue of the writers waiting for a batch, and the
// goroutine that runs the batches.
type groupCommit struct {
	mu     sync.Mutex
	queue  []*groupJob
	closed bool // set by stop: nothing more is queued
	// wake tells runBatches that a job was queued (buffered: one wake-up
	// covers every job queued before it is taken).
	wake chan struct{}
	// quit is closed by stop; done by runBatches when it returns.
	quit, done chan struct{}
}

func newGroupCommit() *groupCommit {
	return &groupCommit{wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
}

// runBatches runs the queued jobs, a batch at a time, until stop. Each
// batch holds the write token (Store.writers), as every writer does.
func (s *Store) runBatches() {
	g := s.group
	defer close(g.done)
	for {
		select {
		case <-g.quit:
			g.refuseQueued()
			return
		case <-g.wake:
		}
		for g.queued() {
			if g.stopped() {
				return
			}
			select {
			case <-g.quit:
				g.refuseQueued()
				return
			case s.writers <- struct{}{}:
			}
			s.leadBatch()
			<-s.writers
		}
	}
}

// stop refuses new jobs, ends runBatches after the batch it runs, and
// waits for it; a second stop only waits.
func (g *groupCommit) stop() {
	g.mu.Lock()
	first := !g.closed
	g.closed = true
	g.mu.Unlock()
	if first {
		close(g.quit)
	}
	<-g.done
}

// stopped reports whether stop was called, answering the queued jobs
// ErrClosed if so. (A select between quit and the write token would pick
// either when both are ready.)
func (g *groupCommit) stopped() bool {
	select {
	case <-g.quit:
		g.refuseQueued()
		return true
	default:
		return false
	}
}

// queued reports whether a job waits.
func (g *groupCommit) queued() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue) > 0
}

// refuseQueued answers ErrClosed to every job still queued.
func (g *groupCommit) refuseQueued() {
	g.mu.Lock()
	jobs := g.queue
	g.queue = nil
	g.mu.Unlock()
	for _, j := range jobs {
		j.done <- ErrClosed
	}
}

// writeTx runs fn in a write transaction whose statements use the ctx it is
// given (not the caller's). On SQLite the transaction may be shared with
// other requests' (see above); on PostgreSQL it is fn's own (inTx).
func (s *Store) writeTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if s.group == nil {
		return s.inTx(ctx, false, func(tx *sql.Tx) error { return fn(ctx, tx) })
	}
	ctx, cancel := context.WithTimeout(ctx, txTimeout)
	defer cancel()
	j := &groupJob{ctx: ctx, fn: fn, done: make(chan error, 1)}
	g := s.group
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return ErrClosed
	}
	g.queue = append(g.queue, j)
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
	select {
	case err := <-j.done:
		return err
	case <-ctx.Done():
		if g.remove(j) {
			return fmt.Errorf("waiting for the other writers: %w", ctx.Err())
		}
		// A batch has it: its answer comes when that batch ends.
		return <-j.done
	}
}

// remove takes j out of the queue; false when a batch has taken it.
func (g *groupCommit) remove(j *groupJob) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	i := slices.Index(g.queue, j)
	if i < 0 {
		return false
	}
	g.queue = slices.Delete(g.queue, i, i+1)
	return true
}

// take removes the first maxBatch jobs of the queue.
func (g *groupCommit) take() []*groupJob {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := min(len(g.queue), maxBatch)
	batch := slices.Clone(g.queue[:n])
	g.queue = slices.Delete(g.queue, 0, n)
	return batch
}

// requeue puts jobs back at the front of the queue, in their order.
func (g *groupCommit) requeue(jobs []*groupJob) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.queue = slices.Insert(g.queue, 0, jobs...)
}

// leadBatch runs the queued jobs as one transaction; the caller
// (runBatches) holds the write token.
func (s *Store) leadBatch() {
	var batch []*groupJob
	for _, j := range s.group.take() {
		if err := j.ctx.Err(); err != nil {
			j.done <- fmt.Errorf("waiting for the other writers: %w", err)
			continue
		}
		batch = append(batch, j)
	}
	if len(batch) == 0 {
		return
	}
	// The batch's own bound: no request's context may cut it short.
	ctx, cancel := context.WithTimeout(context.Background(), txTimeout)
	defer cancel()
	results := make([]error, len(batch))
	ran, err := s.runBatch(ctx, batch, results)
	if err != nil && ran == 0 {
		// Nothing ran: the transaction itself fails. Every job hears it
		// (requeued, they could fail the same way for ever).
		ran = len(batch)
	}
	if ran < len(batch) {
		s.group.requeue(batch[ran:])
	}
	for i, j := range batch[:ran] {
		if results[i] == nil && err != nil {
			results[i] = err
		}
		j.done <- results[i]
	}
}

// runBatch runs batch in one transaction and commits it, recording each
// job's own result; it returns how many jobs it ran and the error that
// ended the transaction without a commit (or of the commit), if any.
func (s *Store) runBatch(ctx context.Context, batch []*groupJob, results []error) (ran int, err error) {
	tx, err := s.begin(ctx, false)
	if err != nil {
		return 0, err
	}
	// The transaction is bounded by ctx (database/sql rolls it back when
	// ctx ends, and BEGIN gives up); its statements run without ctx's
	// deadline, since with one modernc starts a goroutine per statement to
	// interrupt it, about 7% of the batch goroutine's CPU (docs/benchmarks.md,
	// issue 22, round 5). A statement of ours cannot hang on its own: the
	// transaction holds the write lock from its BEGIN IMMEDIATE on, so its
	// statements wait for nobody (readers never block a WAL writer).
	ctx = context.WithoutCancel(ctx)
	if len(batch) == 1 {
		// Alone: no savepoint, its failure rolls the transaction back.
		if results[0] = s.runJob(ctx, tx, batch[0]); results[0] != nil {
			_ = tx.Rollback()
			return 1, nil
		}
	} else {
		for i, j := range batch {
			if ran, err := s.inSavepoint(ctx, tx, j, &results[i]); err != nil {
				_ = tx.Rollback()
				if ran {
					i++
				}
				return i, err
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return len(batch), fmt.Errorf("committing transaction: %w", err)
	}
	return len(batch), nil
}

// runJob runs j's work in tx. A panic in it is j's failure alone, as a
// panic in a request's handler is that request's: the batch goroutine
// logs it, rolls j back like any failed request and goes on, where the
// panic would otherwise end the process with every queued request.
func (s *Store) runJob(ctx context.Context, tx *sql.Tx, j *groupJob) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("a write panicked; it is rolled back and answered an error", "panic", p, "stack", string(debug.Stack()))
			err = errWritePanicked
		}
	}()
	return j.fn(ctx, tx)
}

// inSavepoint runs j between a savepoint and its release, rolling back to
// the savepoint when j fails (j's error goes to result). The error it
// returns is the transaction's (a savepoint statement that failed: the
// batch ends), and ran whether j ran before it.
func (s *Store) inSavepoint(ctx context.Context, tx *sql.Tx, j *groupJob, result *error) (ran bool, err error) {
	q := s.prep(tx)
	if _, err := q.ExecContext(ctx, "SAVEPOINT request"); err != nil {
		return false, fmt.Errorf("starting a request's savepoint: %w", err)
	}
	if *result = s.runJob(ctx, tx, j); *result != nil {
		if _, err := q.ExecContext(ctx, "ROLLBACK TO request"); err != nil {
			return true, fmt.Errorf("rolling back a failed request (%v): %w", *result, err)
		}
	}
	if _, err := q.ExecContext(ctx, "RELEASE request"); err != nil {
		return true, fmt.Errorf("releasing a request's savepoint: %w", err)
	}
	return true, nil
}
