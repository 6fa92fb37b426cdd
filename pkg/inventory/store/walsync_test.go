package store

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"yunion.io/x/mps-daemon/pkg/api"
)

// The group commit's sync outside the write token (walsync.go), with a sync
// the test holds: every sync waits for the test to let it go.

// heldSyncs is a syncWAL whose syncs wait for the test: started receives
// each sync's path as it begins, release the result it then returns.
type heldSyncs struct {
	ctx     context.Context
	started chan string
	release chan error
}

func newHeldSyncs(t *testing.T) *heldSyncs {
	return &heldSyncs{ctx: t.Context(), started: make(chan string), release: make(chan error)}
}

func (h *heldSyncs) sync(path string) error {
	select {
	case h.started <- path:
	case <-h.ctx.Done(): // the test ended (failed) with a sync held
		return h.ctx.Err()
	}
	select {
	case err := <-h.release:
		return err
	case <-h.ctx.Done():
		return h.ctx.Err()
	}
}

// openSQLiteWith opens a new SQLite store with opts and closes it when t
// ends.
func openSQLiteWith(t *testing.T, log *slog.Logger, opts sqliteOptions) *Store {
	t.Helper()
	s, err := openSQLite(t.Context(), filepath.Join(t.TempDir(), "inventory.db"), log, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("closing the store: %v", err)
		}
	})
	return s
}

// claimFn is a write that gives device id to guest.
func claimFn(s *Store, guest, id string) func(ctx context.Context, tx *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		n, err := s.claim(ctx, tx, guest, id, s.timestamp())
		if err == nil && n != 1 {
			err = errors.New("not claimed")
		}
		return err
	}
}

// attachAsync attaches dev to guest in a goroutine; the answer comes on the
// channel.
func attachAsync(t *testing.T, s *Store, guest, dev string) chan error {
	c := make(chan error, 1)
	go func() {
		_, err := s.AttachDevice(t.Context(), guest, dev)
		c <- err
	}()
	return c
}

// notAnswered fails the test if c already holds an answer.
func notAnswered(t *testing.T, c chan error, what string) {
	t.Helper()
	select {
	case err := <-c:
		t.Fatalf("%s answered (%v) before a sync that covers it returned", what, err)
	default:
	}
}

// waitCommitted waits until n batches have committed.
func waitCommitted(t *testing.T, s *Store, n uint64) {
	t.Helper()
	for s.group.wal.lastCommitted() < n {
		waitForQueue(t)
	}
}

// An attach is answered only once a sync that began after its COMMIT has
// returned; the next batch commits while that sync is under way.
func TestGroupCommitAnswersAfterSync(t *testing.T) {
	h := newHeldSyncs(t)
	s := openSQLiteWith(t, nil, sqliteOptions{syncWAL: h.sync})
	devs := allocHost(t, s, "h1")

	// The first batch: two attaches, one of which leads it.
	first := queueWrites(t, s, claimFn(s, "g1", devs[0].ID), claimFn(s, "g0", devs[3].ID))
	path := <-h.started
	if path != s.group.wal.path || filepath.Base(path) != "inventory.db-wal" {
		t.Errorf("synced %s, want the database's -wal file (%s)", path, s.group.wal.path)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the WAL the store syncs: %v", err)
	}
	for _, c := range first {
		notAnswered(t, c, "an attach of the first batch")
	}
	// Readers already see it (walsync.go says so).
	if g := guests(t, s)[devs[0].ID]; g != "g1" {
		t.Errorf("device held by %q before the sync, want g1 seen", g)
	}

	// The write token is free during the sync: a second attach commits.
	second := attachAsync(t, s, "g2", devs[1].ID)
	waitCommitted(t, s, 2)
	for _, c := range first {
		notAnswered(t, c, "an attach of the first batch")
	}
	notAnswered(t, second, "the second attach")

	// The first sync began before the second COMMIT: it answers the first
	// batch only, and the second waits for a sync of its own.
	h.release <- nil
	for _, c := range first {
		if err := <-c; err != nil {
			t.Fatalf("an attach of the first batch: %v", err)
		}
	}
	<-h.started
	notAnswered(t, second, "the second attach")
	h.release <- nil
	if err := <-second; err != nil {
		t.Fatalf("second attach: %v", err)
	}
}

// While a sync is under way, one batch runs; the requests that come after
// it wait for that sync to end and then run as one batch.
func TestGroupCommitOneBatchPerSync(t *testing.T) {
	h := newHeldSyncs(t)
	s := openSQLiteWith(t, nil, sqliteOptions{syncWAL: h.sync})
	devs := allocHost(t, s, "h1")

	first := attachAsync(t, s, "g1", devs[0].ID)
	<-h.started
	second := attachAsync(t, s, "g2", devs[1].ID) // runs during the sync
	waitCommitted(t, s, 2)
	// Two more: held back until the first sync ends, both queued.
	later := []chan error{attachAsync(t, s, "g3", devs[2].ID), attachAsync(t, s, "g4", devs[3].ID)}
	for {
		s.group.mu.Lock()
		n := len(s.group.queue)
		s.group.mu.Unlock()
		if n == 2 {
			break
		}
		waitForQueue(t)
	}
	if n := s.group.wal.lastCommitted(); n != 2 {
		t.Fatalf("%d batches committed during the first sync, want 2", n)
	}
	h.release <- nil
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// The syncs after the first are let go as they come.
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-h.started:
				h.release <- nil
			case <-done:
				return
			}
		}
	}()
	for _, c := range append(later, second) {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
	if n := s.group.wal.lastCommitted(); n != 3 {
		t.Errorf("%d batches committed, want 3 (the two held back in one)", n)
	}
}

// errorCounter counts the records at level Error.
type errorCounter struct {
	mu sync.Mutex
	n  int
}

func (c *errorCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *errorCounter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *errorCounter) WithGroup(string) slog.Handler            { return c }
func (c *errorCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Level >= slog.LevelError {
		c.n++
	}
	return nil
}

func (c *errorCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// A failed sync is every waiting request's answer, and every later write is
// refused without being run; reads go on; it is logged once.
func TestGroupCommitSyncFailureFailsClosed(t *testing.T) {
	h := newHeldSyncs(t)
	logged := &errorCounter{}
	s := openSQLiteWith(t, slog.New(logged), sqliteOptions{syncWAL: h.sync})
	devs := allocHost(t, s, "h1")
	errRefused := errors.New("this request fails on its own")
	results := queueWrites(t, s,
		claimFn(s, "g1", devs[0].ID),
		func(context.Context, *sql.Tx) error { return errRefused },
		claimFn(s, "g3", devs[2].ID),
	)
	<-h.started
	for _, c := range results {
		notAnswered(t, c, "a request of the batch")
	}
	// A request that queues now runs after the failure is known.
	s.writers <- struct{}{}
	ran := make(chan struct{}, 1)
	late := make(chan error, 1)
	go func() {
		late <- s.writeTx(t.Context(), func(context.Context, *sql.Tx) error {
			ran <- struct{}{}
			return nil
		})
	}()
	for {
		s.group.mu.Lock()
		n := len(s.group.queue)
		s.group.mu.Unlock()
		if n == 1 {
			break
		}
		waitForQueue(t)
	}
	h.release <- syscall.EIO
	for i, c := range results {
		err := <-c
		switch {
		case i == 1 && !errors.Is(err, errRefused):
			t.Errorf("the failed request: %v, want its own error", err)
		case i != 1 && (!errors.Is(err, ErrWALSyncFailed) || !errors.Is(err, syscall.EIO)):
			t.Errorf("request %d: %v, want ErrWALSyncFailed with EIO", i, err)
		}
	}

	<-s.writers
	if err := <-late; !errors.Is(err, ErrWALSyncFailed) {
		t.Errorf("a write queued during the failed sync: %v, want ErrWALSyncFailed", err)
	}
	select {
	case <-ran:
		t.Error("a write queued during the failed sync ran")
	default:
	}

	// Later writes are refused, before they run: no sync is started (the
	// held sync would block them otherwise).
	if _, err := s.AttachDevice(t.Context(), "g4", devs[3].ID); !errors.Is(err, ErrWALSyncFailed) {
		t.Errorf("attach after the failure: %v, want ErrWALSyncFailed", err)
	}
	if _, err := s.DetachDevice(t.Context(), "g1", devs[0].ID); !errors.Is(err, ErrWALSyncFailed) {
		t.Errorf("detach after the failure: %v, want ErrWALSyncFailed", err)
	}
	if _, err := s.CreateHost(t.Context(), api.Host{Name: "h2"}); !errors.Is(err, ErrWALSyncFailed) {
		t.Errorf("a host's creation after the failure: %v, want ErrWALSyncFailed", err)
	}
	if _, err := s.DeleteHost(t.Context(), "h1"); !errors.Is(err, ErrWALSyncFailed) {
		t.Errorf("a transaction's write after the failure: %v, want ErrWALSyncFailed", err)
	}
	if _, err := s.GetHost(t.Context(), "h1"); err != nil {
		t.Errorf("a read after the failure: %v", err)
	}
	if n := logged.count(); n != 1 {
		t.Errorf("%d error records, want the failure logged once", n)
	}
}

// The batches' connection commits without a sync of its own; every other
// connection keeps synchronous=FULL.
func TestGroupCommitConnectionSynchronous(t *testing.T) {
	s := openSQLiteTest(t)
	devs := allocHost(t, s, "h1")
	if _, err := s.AttachDevice(t.Context(), "g1", devs[0].ID); err != nil {
		t.Fatal(err)
	}
	synchronous := func(q interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}) int {
		t.Helper()
		var n int
		if err := q.QueryRowContext(t.Context(), "PRAGMA synchronous").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	s.writers <- struct{}{}
	batch := synchronous(s.group.conn)
	<-s.writers
	if batch != 1 {
		t.Errorf("the batches' connection: synchronous=%d, want 1 (NORMAL)", batch)
	}
	if n := synchronous(s.db); n != 2 {
		t.Errorf("the pool: synchronous=%d, want 2 (FULL)", n)
	}
}

// fileSyncer syncs the file at the path, a new one included, and syncs the
// directory again when the file has been created anew.
func TestFileSyncerFollowsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inventory.db-wal")
	f := newFileSyncer()
	if err := f.sync(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("syncing a missing file: %v, want ErrNotExist", err)
	}
	if err := os.WriteFile(path, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.sync(path); err != nil {
		t.Fatal(err)
	}
	first := f.met
	if err := f.sync(path); err != nil || f.met != first {
		t.Errorf("the same file again: %v; directory synced again: %v", err, f.met != first)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.sync(path); err != nil {
		t.Fatal(err)
	}
	if f.met == first {
		t.Error("a file created anew: the directory was not synced again")
	}
	if err := f.close(); err != nil {
		t.Fatal(err)
	}
}
