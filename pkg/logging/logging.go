// Package logging builds the slog loggers of the three binaries: one line per
// event, key=value pairs, and no timestamp of our own when journald already
// stamps each line (it sets JOURNAL_STREAM for the services it starts).
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// ParseLevel reads debug, info, warn or error (any case).
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "", "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("log level %q: want debug, info, warn or error", s)
}

// New returns a text logger writing to w. underJournald drops the time
// attribute, which journald records itself.
func New(w io.Writer, level slog.Level, underJournald bool) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if underJournald {
		opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// FromEnv is New with the level parsed from levelName and journald detected
// from the environment lookup (os.Getenv in mains).
func FromEnv(w io.Writer, levelName string, getenv func(string) string) (*slog.Logger, error) {
	lvl, err := ParseLevel(levelName)
	if err != nil {
		return nil, err
	}
	return New(w, lvl, getenv("JOURNAL_STREAM") != ""), nil
}
