package agent

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// debounce lets an editor finish: a save is often several events (truncate,
// write, chmod, or write-temp-then-rename), and one reload should follow.
const debounce = 50 * time.Millisecond

// watcher reports edits of a set of files. It watches their directories, not
// the files: editors that save by writing a new file and renaming it over the
// old one replace the inode a file watch would be on.
type watcher struct {
	fs     *fsnotify.Watcher
	log    *slog.Logger
	events chan struct{}

	mu    sync.Mutex
	files map[string]bool // cleaned absolute paths
	dirs  map[string]bool
}

func newWatcher(log *slog.Logger, files []string) (*watcher, error) {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watching the configuration: %w", err)
	}
	w := &watcher{fs: fw, log: log, events: make(chan struct{}, 1), files: map[string]bool{}, dirs: map[string]bool{}}
	w.set(files)
	return w, nil
}

// set replaces the watched files (host.conf may name another device YAML).
func (w *watcher) set(files []string) {
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

func (w *watcher) wanted(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	abs, err := filepath.Abs(name)
	return err == nil && w.files[abs]
}

// run forwards debounced edits to events until ctx ends.
func (w *watcher) run(ctx context.Context) {
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
			if w.wanted(ev.Name) {
				t.Reset(debounce)
			}
		case err, ok := <-w.fs.Errors:
			if !ok {
				return
			}
			w.log.Warn("configuration watch", "err", err)
		case <-t.C:
			select {
			case w.events <- struct{}{}:
			default: // a reload is already pending; it will read the latest files
			}
		}
	}
}

func (w *watcher) close() { _ = w.fs.Close() }
