package config

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// devicesYAML is a device YAML of two GPUs, split n0 and n1 ways.
func devicesYAML(n0, n1 int) string {
	return fmt.Sprintf("devices:\n- path: 0000:1A:00.0\n  type: NVIDIA_MPS\n  virtual_number: %d\n- path: 0000:DB:00.0\n  type: NVIDIA_MPS\n  virtual_number: %d\n", n0, n1)
}

// writeAtomic saves content over path as an editor that saves atomically
// does: a new file renamed over the old one.
func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func startWatcher(t *testing.T) (*Watcher, string) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "devices.yml")
	if err := os.WriteFile(file, []byte(devicesYAML(4, 2)), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := NewWatcher(slog.New(slog.DiscardHandler), []string{file})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go w.Run(ctx)
	t.Cleanup(func() { cancel(); w.Close() })
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
	content := devicesYAML(12, 2)
	chunks := []string{content[:20], content[20:61], content[61:]}
	var last time.Time
	for _, c := range chunks {
		select {
		case <-w.Events():
			t.Fatal("a file half written was announced")
		case <-time.After(250 * time.Millisecond):
		}
		if !w.Saving() {
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
	case <-w.Events():
		if since := time.Since(last); since < writeQuiet {
			t.Errorf("announced %s after the last write, before the file was quiet for %s", since, writeQuiet)
		}
	case <-time.After(writeQuiet + 5*time.Second):
		t.Fatal("the finished file was never announced")
	}
	select {
	case <-w.Events():
		t.Error("one save announced twice")
	case <-time.After(2 * debounce):
	}
	if w.Saving() {
		t.Error("still saving after the announcement")
	}
}

// An atomic save (rename over the file) is complete when it appears: it is
// announced after the short debounce.
func TestWatcherAnnouncesAnAtomicSaveAtOnce(t *testing.T) {
	w, file := startWatcher(t)
	start := time.Now()
	writeAtomic(t, file, devicesYAML(3, 2))
	select {
	case <-w.Events():
		if d := time.Since(start); d >= writeQuiet {
			t.Errorf("an atomic save waited %s, as long as an in-place one", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not announced")
	}
}
