package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func startWatcher(t *testing.T) (*watcher, string) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "devices.yml")
	if err := os.WriteFile(file, []byte(fourAndTwo), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := newWatcher(slog.New(slog.DiscardHandler), []string{file})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go w.run(ctx)
	t.Cleanup(func() { cancel(); w.close() })
	return w, file
}

// A file written in place, in chunks with pauses, is announced once, after
// the writer has been quiet for writeQuiet: never while it holds a part.
func TestWatcherWaitsForAnInPlaceWriteToEnd(t *testing.T) {
	w, file := startWatcher(t)
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	content := yamlFor(12, 2)
	chunks := []string{content[:20], content[20:61], content[61:]}
	var last time.Time
	for _, c := range chunks {
		select {
		case <-w.events:
			t.Fatal("a file half written was announced")
		case <-time.After(250 * time.Millisecond):
		}
		if !w.saving() {
			t.Error("an in-place save in progress is not reported")
		}
		if _, err := f.WriteString(c); err != nil {
			t.Fatal(err)
		}
		last = time.Now()
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.events:
		if since := time.Since(last); since < writeQuiet {
			t.Errorf("announced %s after the last write, before the file was quiet for %s", since, writeQuiet)
		}
	case <-time.After(writeQuiet + 5*time.Second):
		t.Fatal("the finished file was never announced")
	}
	select {
	case <-w.events:
		t.Error("one save announced twice")
	case <-time.After(2 * debounce):
	}
	if w.saving() {
		t.Error("still saving after the announcement")
	}
}

// An atomic save (rename over the file) is complete when it appears: it is
// announced after the short debounce.
func TestWatcherAnnouncesAnAtomicSaveAtOnce(t *testing.T) {
	w, file := startWatcher(t)
	start := time.Now()
	writeAtomic(t, file, yamlFor(3, 2))
	select {
	case <-w.events:
		if d := time.Since(start); d >= writeQuiet {
			t.Errorf("an atomic save waited %s, as long as an in-place one", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not announced")
	}
}
