package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
)

// The group commit's sync, outside the write token (SQLite). The batches of
// groupcommit.go run on a connection of their own with synchronous=NORMAL:
// in WAL mode a COMMIT there writes the batch's WAL frames to the operating
// system and does not fsync them. The leader then gives the write token
// back, so that the next batch runs its statements while this one's sync is
// under way, fsyncs the WAL file itself (walSyncer.wait) and only then
// answers the batch. So:
//
//   - an answer still means committed and on disk: no request hears "done"
//     before an fsync of the WAL that began after its COMMIT returned has
//     returned, which is what synchronous=FULL gave (the fsync inside the
//     COMMIT);
//   - one fsync covers every batch committed before it began (an fsync
//     writes all of the file's dirty pages, wherever they are). One batch
//     runs while a sync is under way; the next waits for that sync to end
//     (walSyncer.holdBack), so the requests that arrive during a sync
//     share one batch, and the disk is kept busy with one sync after the
//     other;
//   - what SQLite still syncs itself at NORMAL keeps the database file
//     behind a synced WAL: a checkpoint syncs the WAL before it copies
//     pages into the database, syncs the database after, and the WAL's
//     header is synced when SQLite starts writing the WAL from its
//     beginning again (https://sqlite.org/pragma.html#pragma_synchronous).
//     A power loss before our fsync loses the batch, never the database's
//     consistency, and WAL recovery stops at the first frame that is
//     missing, so a later batch cannot survive without an earlier one;
//   - readers on other connections, and the next batch, see a batch's
//     changes as soon as its COMMIT returns, before its fsync: a power loss
//     in that window takes back something a reader saw (never something a
//     writer was told is done);
//   - a failed fsync is fatal for durability (the kernel may have dropped
//     the pages it could not write, and a later fsync can succeed without
//     them): every request waiting on it is answered the error (as a
//     failed COMMIT is: the change may or may not be on disk), and every
//     later write of this Store is refused with it (ErrWALSyncFailed:
//     attaches, detaches, hosts, devices, new tokens, logins) until the
//     process is restarted and SQLite recovers the database from what is
//     on disk; the failure is logged once. PostgreSQL, after a failed
//     fsync, stops altogether. Revocations are still tried (each commits
//     with synchronous=FULL and reports its own failure): refusing one
//     would leave a token usable.
//
// The other writers (inTx and single statements: hosts, devices, tokens,
// migrations) run on the pool's connections with synchronous=FULL, as
// before: their COMMIT syncs the WAL, and with it any batch before them.

// ErrWALSyncFailed: an fsync of the SQLite database's WAL failed, so the
// Store refuses writes until it is opened again.
var ErrWALSyncFailed = errors.New("an fsync of the database's write-ahead log failed; writes are refused until the inventory is restarted")

// walSyncer syncs the WAL for the batches and tells each batch when a sync
// covers it.
type walSyncer struct {
	path string
	// sync fsyncs the file at path (fileSyncer; tests inject their own).
	sync func(path string) error
	// release closes what sync keeps open; nil when nothing.
	release func() error
	log     *slog.Logger

	mu sync.Mutex
	// committed counts the batches committed; a batch's number is the
	// count once its COMMIT has returned.
	committed uint64
	// synced is the highest batch number a finished sync covers.
	synced uint64
	// running is closed when the sync under way ends; nil when none is.
	running chan struct{}
	// runningCovers is the last batch the sync under way covers.
	runningCovers uint64
	// err is the first sync failure, for good (see above).
	err error
}

// newWALSyncer syncs the WAL of the database file dbFile, as SQLite names
// it (sqliteFile).
func newWALSyncer(dbFile string, sync func(path string) error, log *slog.Logger) *walSyncer {
	w := &walSyncer{path: dbFile + "-wal", sync: sync, log: log}
	if sync == nil {
		f := newFileSyncer()
		w.sync, w.release = f.sync, f.close
	}
	return w
}

// close lets go of what the syncs keep open.
func (w *walSyncer) close() error {
	if w.release == nil {
		return nil
	}
	if err := w.release(); err != nil {
		return fmt.Errorf("closing the write-ahead log: %w", err)
	}
	return nil
}

// committedBatch numbers a batch whose COMMIT has returned. The leader
// calls it while it holds the write token.
func (w *walSyncer) committedBatch() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.committed++
	return w.committed
}

// lastCommitted is the number of the last batch committed.
func (w *walSyncer) lastCommitted() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.committed
}

// holdBack returns when no batch waits for a sync that has not begun: while
// a sync is under way and a batch has committed after it began, the next
// batch waits for that sync to end (the batch before it then gets a sync of
// its own). The leader calls it holding the write token, so the requests
// that arrive meanwhile queue and run as one batch: without it, a batch
// began as soon as the one before committed, with the few requests queued
// by then, and several small batches waited for the same sync, each paying
// its BEGIN, COMMIT and WAL pages (more CPU per request for the same
// number of fsyncs).
func (w *walSyncer) holdBack() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.err == nil && w.running != nil && w.committed > w.runningCovers {
		running := w.running
		w.mu.Unlock()
		<-running
		w.mu.Lock()
	}
}

// failed is the sync failure that refuses every write, or nil.
func (w *walSyncer) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// wait returns once a sync that began after batch n's COMMIT has returned
// (it runs one when none is under way), or with the error of a failed one.
func (w *walSyncer) wait(n uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		switch {
		case w.err != nil:
			return w.err
		case w.synced >= n:
			return nil
		case w.running != nil:
			// It may have begun before batch n's COMMIT: wait for it,
			// then look again.
			running := w.running
			w.mu.Unlock()
			<-running
			w.mu.Lock()
		default:
			covers, running := w.committed, make(chan struct{})
			w.running, w.runningCovers = running, covers
			w.mu.Unlock()
			err := w.sync(w.path)
			w.mu.Lock()
			w.running = nil
			close(running)
			if err != nil {
				w.err = fmt.Errorf("%w: %w", ErrWALSyncFailed, err)
				w.log.Error("fsync of the database's write-ahead log failed; refusing every write from now on (restart the inventory)", "path", w.path, "err", err)
				continue
			}
			w.synced = max(w.synced, covers)
		}
	}
}

// fileSyncer fsyncs a file it opens by its path on every sync, so that a
// WAL that SQLite removed and created again is the file synced, never one
// left behind by a stale descriptor. The first time it meets a file, it
// also syncs the directory, so that a new file's name is on disk with its
// contents. It keeps the last file it met open, only to tell it from a new
// one: an inode number is not reused while a descriptor holds it.
type fileSyncer struct {
	mu sync.Mutex
	// met is the file whose directory was synced last; nil after close.
	met    *os.File
	closed bool
}

func newFileSyncer() *fileSyncer { return &fileSyncer{} }

func (f *fileSyncer) sync(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	file, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening %s to sync it: %w", path, err)
	}
	keep := false
	defer func() {
		if !keep {
			_ = file.Close()
		}
	}()
	if err := file.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	if f.met != nil {
		same, err := sameFile(f.met, file)
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		if same {
			return nil
		}
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("opening the directory of %s to sync it: %w", path, err)
	}
	defer dir.Close()
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("syncing the directory of %s: %w", path, err)
	}
	if f.closed {
		return nil
	}
	if f.met != nil {
		_ = f.met.Close()
	}
	f.met, keep = file, true
	return nil
}

// close lets the last file go.
func (f *fileSyncer) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	if f.met == nil {
		return nil
	}
	err := f.met.Close()
	f.met = nil
	return err
}

func sameFile(a, b *os.File) (bool, error) {
	ai, err := a.Stat()
	if err != nil {
		return false, err
	}
	bi, err := b.Stat()
	if err != nil {
		return false, err
	}
	return os.SameFile(ai, bi), nil
}
