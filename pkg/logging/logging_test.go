package logging

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestJournaldLinesHaveNoTimestamp(t *testing.T) {
	var plain, journal bytes.Buffer
	New(&plain, slog.LevelInfo, false).Info("gpu ready", "gpu", "GPU-1")
	New(&journal, slog.LevelInfo, true).Info("gpu ready", "gpu", "GPU-1")
	if !strings.HasPrefix(plain.String(), "time=") {
		t.Errorf("plain line should start with time=: %q", plain.String())
	}
	if strings.Contains(journal.String(), "time=") {
		t.Errorf("journald line must not carry a timestamp: %q", journal.String())
	}
	if strings.Count(journal.String(), "\n") != 1 || !strings.Contains(journal.String(), `msg="gpu ready" gpu=GPU-1`) {
		t.Errorf("want one key=value line, got %q", journal.String())
	}
}

func TestLevels(t *testing.T) {
	for in, want := range map[string]slog.Level{"debug": slog.LevelDebug, "INFO": slog.LevelInfo, "": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError} {
		got, err := ParseLevel(in)
		if err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseLevel("loud"); err == nil || !strings.Contains(err.Error(), "loud") {
		t.Errorf("a bad level must be named in the error, got %v", err)
	}
	var buf bytes.Buffer
	log, err := FromEnv(&buf, "warn", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown")
	if strings.Contains(buf.String(), "hidden") || !strings.Contains(buf.String(), "shown") {
		t.Errorf("level filter wrong: %q", buf.String())
	}
}
