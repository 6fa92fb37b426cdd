package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
)

// The batches of groupcommit.go, built by hand so that the test knows which
// requests share a transaction: the writers queue their work while the test
// holds the write token, then the Store's batch goroutine runs them as one
// batch.

// queueWrites starts one writeTx per fn while the test holds the write
// token, and returns once all of them are queued; their results come on
// the channels, in fns' order.
func queueWrites(t *testing.T, s *Store, fns ...func(ctx context.Context, tx *sql.Tx) error) []chan error {
	t.Helper()
	out := queueWritesHeld(t, s, fns...)
	<-s.writers
	return out
}

// waitForQueue lets the goroutine that is about to queue run.
func waitForQueue(t *testing.T) {
	t.Helper()
	if t.Context().Err() != nil {
		t.Fatal("the writer never queued")
	}
	runtime.Gosched()
}

// claimWrite is a write that claims device id for guest, failing when it
// is not claimable.
func claimWrite(s *Store, guest, id string) func(ctx context.Context, tx *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		n, err := s.claim(ctx, tx, guest, id, s.timestamp())
		if err == nil && n != 1 {
			err = errors.New("not claimed")
		}
		return err
	}
}

func openSQLiteTest(t *testing.T) *Store {
	t.Helper()
	return openDSN(t, filepath.Join(t.TempDir(), "inventory.db"))
}

// A request that fails in a shared transaction loses its own changes and
// nothing of its neighbours'; the neighbours are committed.
func TestGroupCommitFailedRequestSparesItsBatch(t *testing.T) {
	s := openSQLiteTest(t)
	devs := allocHost(t, s, "h1")
	errFails := errors.New("this request fails after its write")
	results := queueWrites(t, s,
		claimWrite(s, "g1", devs[0].ID),
		func(ctx context.Context, tx *sql.Tx) error {
			// Changes a row, then fails: the change must go.
			if err := claimWrite(s, "g2", devs[1].ID)(ctx, tx); err != nil {
				return err
			}
			return errFails
		},
		claimWrite(s, "g3", devs[2].ID),
		// A statement that fails on its own (a unique violation).
		func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE isolated_devices SET id = ? WHERE id = ?`, devs[4].ID, devs[3].ID)
			return err
		},
		claimWrite(s, "g5", devs[5].ID),
	)
	var errs []error
	for _, c := range results {
		errs = append(errs, <-c)
	}
	if errs[0] != nil || errs[2] != nil || errs[4] != nil {
		t.Errorf("the sound requests failed: %v", errs)
	}
	if !errors.Is(errs[1], errFails) {
		t.Errorf("the failing request: %v, want its own error", errs[1])
	}
	if errs[3] == nil {
		t.Error("the unique violation was answered as a success")
	}
	got := guests(t, s)
	want := map[string]string{devs[0].ID: "g1", devs[1].ID: "", devs[2].ID: "g3", devs[5].ID: "g5"}
	for id, g := range want {
		if got[id] != g {
			t.Errorf("device %s held by %q, want %q", id, got[id], g)
		}
	}
	if _, ok := got[devs[3].ID]; !ok {
		t.Error("the failed rename changed the row")
	}
	checkCounts(t, s)
}

// A request whose caller gave up while it waited in the queue is not run.
func TestGroupCommitCancelledWhileQueued(t *testing.T) {
	s := openSQLiteTest(t)
	devs := allocHost(t, s, "h1")
	s.writers <- struct{}{}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			ran <- struct{}{}
			_, err := s.claim(ctx, tx, "g1", devs[0].ID, s.timestamp())
			return err
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
	cancel()
	err := <-done
	<-s.writers
	if !errors.Is(err, context.Canceled) {
		t.Errorf("writeTx: %v, want context.Canceled", err)
	}
	select {
	case <-ran:
		t.Error("the cancelled request ran")
	default:
	}
	if g := guests(t, s)[devs[0].ID]; g != "" {
		t.Errorf("device held by %q after a cancelled attach", g)
	}
	// The queue is empty and the next writer goes through.
	if _, err := s.AttachDevice(t.Context(), "g2", devs[0].ID); err != nil {
		t.Fatal(err)
	}
}

// Close ends the goroutine that runs the batches: a request still queued
// then is answered ErrClosed, unrun, and so is one sent after it; none
// waits for ever.
func TestGroupCommitClose(t *testing.T) {
	s, err := OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "inventory.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	devs := allocHost(t, s, "h1")
	ran := make(chan struct{}, 1)
	claim := func(ctx context.Context, tx *sql.Tx) error {
		ran <- struct{}{}
		_, err := s.claim(ctx, tx, "g1", devs[0].ID, s.timestamp())
		return err
	}
	queued := queueWritesHeld(t, s, claim)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	// The batch goroutine finds Close before the token the test holds.
	if err := <-queued[0]; !errors.Is(err, ErrClosed) {
		t.Errorf("queued writeTx: %v, want ErrClosed", err)
	}
	<-s.writers
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-ran:
		t.Error("a request queued at Close ran")
	default:
	}
	if err := s.writeTx(t.Context(), claim); !errors.Is(err, ErrClosed) {
		t.Errorf("writeTx after Close: %v, want ErrClosed", err)
	}
	select {
	case <-s.group.done:
	default:
		t.Error("the batch goroutine still runs after Close")
	}
}

// queueWritesHeld is queueWrites leaving the write token held (no batch
// can start before all are queued): the caller takes it back
// (<-s.writers).
func queueWritesHeld(t *testing.T, s *Store, fns ...func(ctx context.Context, tx *sql.Tx) error) []chan error {
	t.Helper()
	s.writers <- struct{}{}
	out := make([]chan error, len(fns))
	for i, fn := range fns {
		out[i] = make(chan error, 1)
		go func() { out[i] <- s.writeTx(t.Context(), fn) }()
		// Queued in this order: wait for it before starting the next.
		for {
			s.group.mu.Lock()
			n := len(s.group.queue)
			s.group.mu.Unlock()
			if n == i+1 {
				break
			}
			waitForQueue(t)
		}
	}
	return out
}

// A request whose work panics fails alone: its neighbours in the batch are
// committed, the batch goroutine goes on, and later writes go through.
func TestGroupCommitPanicFailsOnlyItsRequest(t *testing.T) {
	s := openSQLiteTest(t)
	devs := allocHost(t, s, "h1")
	panics := func(ctx context.Context, tx *sql.Tx) error {
		if err := claimWrite(s, "g2", devs[1].ID)(ctx, tx); err != nil {
			return err
		}
		panic("boom")
	}
	results := queueWrites(t, s, claimWrite(s, "g1", devs[0].ID), panics, claimWrite(s, "g3", devs[2].ID))
	for i, want := range []error{nil, errWritePanicked, nil} {
		if err := <-results[i]; !errors.Is(err, want) {
			t.Errorf("request %d: %v, want %v", i, err, want)
		}
	}
	got := guests(t, s)
	for id, g := range map[string]string{devs[0].ID: "g1", devs[1].ID: "", devs[2].ID: "g3"} {
		if got[id] != g {
			t.Errorf("device %s held by %q, want %q", id, got[id], g)
		}
	}
	// Alone in its batch too, and the next write goes through.
	if err := s.writeTx(t.Context(), panics); !errors.Is(err, errWritePanicked) {
		t.Errorf("a lone panicking write: %v, want errWritePanicked", err)
	}
	if _, err := s.AttachDevice(t.Context(), "g4", devs[3].ID); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s)
}

// Closing a Store while writers hammer it leaves none of them waiting: each
// writer's next write is answered, done or refused, and Close returns.
func TestGroupCommitCloseUnderLoad(t *testing.T) {
	s, err := OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "inventory.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	devs := allocHost(t, s, "h1")
	const writers = 8
	errs := make(chan error, writers)
	started := make(chan struct{}, writers)
	for i := range writers {
		go func() {
			guest, id := fmt.Sprintf("g%d", i), devs[i].ID
			for n := 0; ; n++ {
				if n == 1 {
					started <- struct{}{}
				}
				if _, err := s.AttachDevice(context.Background(), guest, id); err != nil {
					errs <- err
					return
				}
				if _, err := s.DetachDevice(context.Background(), guest, id); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range writers {
		<-started
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// A writer left waiting shows as this test hanging until go test's
	// -timeout, with its stack.
	for range writers {
		if err := <-errs; !errors.Is(err, ErrClosed) {
			t.Errorf("a write after Close: %v, want ErrClosed", err)
		}
	}
}
