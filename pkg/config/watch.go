package config

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// When is a file being written complete? An editor that saves atomically
// writes a new file and renames it over the old one: the watched name never
// holds a partial file, and only a rename (and perhaps a chmod) happens to
// it. Those saves are read after debounce, which collects the events of one
// save into one reload. A file written in place (truncated, then written in
// chunks: `cat > f`, `cp`, an editor that overwrites) holds every
// intermediate state on the way, and nothing tells when the writer is done:
// a write to the watched name makes the watcher wait until no event has come
// for writeQuiet, well past the pauses of a writer that is still at it (a
// shell pipeline, a slow copy; at least 250 ms between chunks is covered).
// A writer that pauses longer than writeQuiet is seen midway; the checks of
// the configuration and the agent's hold of a risky change (pkg/agent,
// guard.go) are what stand in its way then.
const (
	debounce   = 50 * time.Millisecond
	writeQuiet = time.Second
)

// Watcher reports edits of a set of files (host.conf and the device YAML it
// names), each save once it is complete (above). It watches their
// directories, not the files: editors that save by writing a new file and
// renaming it over the old one replace the inode a file watch would be on.
type Watcher struct {
	fs     *fsnotify.Watcher
	log    *slog.Logger
	events chan struct{}

	mu    sync.Mutex
	files map[string]bool // cleaned absolute paths
	dirs  map[string]bool
	// inPlace is set while a watched file written in place waits for
	// writeQuiet.
	inPlace bool
}

// NewWatcher watches files; it reports nothing until Run.
func NewWatcher(log *slog.Logger, files []string) (*Watcher, error) {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watching the configuration: %w", err)
	}
	w := &Watcher{fs: fw, log: log, events: make(chan struct{}, 1), files: map[string]bool{}, dirs: map[string]bool{}}
	w.Set(files)
	return w, nil
}

// Set replaces the watched files (host.conf may name another device YAML).
func (w *Watcher) Set(files []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.files = map[string]bool{}
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			continue
		}
		w.files[abs] = true
		dir := filepath.Dir(abs)
		if w.dirs[dir] {
			continue
		}
		if err := w.fs.Add(dir); err != nil {
			w.log.Warn("cannot watch a configuration directory; reload with SIGHUP", "dir", dir, "err", err)
			continue
		}
		w.dirs[dir] = true
	}
}

// Saving reports a watched file written in place that has not been quiet
// for writeQuiet yet: a reload now could read it half written.
func (w *Watcher) Saving() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inPlace
}

func (w *Watcher) wanted(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	abs, err := filepath.Abs(name)
	return err == nil && w.files[abs]
}

// Events has a value when a watched file's save is complete; one pending
// at most (a reload reads the latest files).
func (w *Watcher) Events() <-chan struct{} { return w.events }

// Run forwards debounced edits to Events until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.fs.Events:
			if !ok {
				return
			}
			if !w.wanted(ev.Name) {
				continue
			}
			w.mu.Lock()
			if ev.Has(fsnotify.Write) {
				w.inPlace = true
			}
			wait := debounce
			if w.inPlace {
				wait = writeQuiet
			}
			w.mu.Unlock()
			t.Reset(wait)
		case err, ok := <-w.fs.Errors:
			if !ok {
				return
			}
			w.log.Warn("configuration watch", "err", err)
		case <-t.C:
			w.mu.Lock()
			w.inPlace = false
			w.mu.Unlock()
			select {
			case w.events <- struct{}{}:
			default: // a reload is already pending; it will read the latest files
			}
		}
	}
}

// Close stops watching.
func (w *Watcher) Close() { _ = w.fs.Close() }
