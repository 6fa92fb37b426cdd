package mps

import (
	"errors"
	"log/slog"
	"testing"
	"time"
)

// TestParseCommand reads the command lines a real control daemon wrote
// (docs/gpu-runs/probe-privileged-2026-11-29.txt), tells what each
// changes and which server it names, and takes no forged line for one.
func TestParseCommand(t *testing.T) {
	for _, c := range []struct {
		line   string
		cmd    string
		kind   CommandKind
		server int
		limits bool
		err    string // "" ok; "-" not a command line
	}{
		{"[2026-11-29 04:43:49.847 Control   527] Cmd:set_active_thread_percentage 873 12", "set_active_thread_percentage 873 12", KindServer, 873, true, ""},
		{"[2026-11-29 04:43:49.854 Control   527] Cmd:terminate_client 873 530", "terminate_client 873 530", KindServer, 873, false, ""},
		{"[2026-11-29 04:43:49.865 Control   527] Cmd:shutdown_server 873", "shutdown_server 873", KindServer, 873, false, ""},
		{"[2026-11-29 04:43:49.814 Control   527] Cmd:set_default_active_thread_percentage 37", "set_default_active_thread_percentage 37", KindDaemon, 0, false, ""},
		{"[2026-11-29 04:43:49.821 Control   527] Cmd:set_default_device_pinned_mem_limit 0 3G", "set_default_device_pinned_mem_limit 0 3G", KindDaemon, 0, false, ""},
		{"[2026-11-29 04:43:59.169 Control   527] Cmd:quit", "quit", KindDaemon, 0, false, ""},
		{"[2026-11-29 04:43:49.840 Control   527] Cmd:get_server_status 873", "get_server_status 873", "", 0, false, ""},
		{"[2026-11-29 04:43:49.948 Control   527] Cmd:get_server_list", "get_server_list", "", 0, false, ""},
		{"[2026-11-29 04:43:49.948 Control   527] Cmd:set_device_pinned_mem_limit 873 0 200G", "set_device_pinned_mem_limit 873 0 200G", KindServer, 873, true, ""},
		{"[2026-11-29 04:43:49.948 Control   527] Cmd:set_active_thread_percentage x 12", "set_active_thread_percentage x 12", KindServer, 0, false, ""},
		{"[2026-11-29 04:43:49.948 Control   527] Cmd:", "", "", 0, false, ""},
		// Not command lines: the daemon's other lines, another process's
		// header, a mark inside a command's text.
		{"[2026-11-29 04:43:49.847 Control   527] 12.0", "", "", 0, false, "-"},
		{"[2026-11-29 04:43:49.865 Control   527] Try shutting down server 873, backoff is disabled", "", "", 0, false, "-"},
		{"[2026-11-29 04:43:49.497 Control   873] Starting new server 873 for user 0", "", "", 0, false, "-"},
		{"[2026-11-29 04:43:49.848 Server    873] Cmd:quit", "", "", 0, false, "-"},
		{"junk] Cmd:quit", "", "", 0, false, "-"},
		{"", "", "", 0, false, "-"},
		{"[2026-13-29 04:43:49.848 Control   527] Cmd:quit", "", "", 0, false, "time"},
	} {
		got, err := ParseCommand([]byte(c.line), time.UTC)
		switch c.err {
		case "":
			if err != nil || got.Line != c.cmd || got.Kind != c.kind || got.Server != c.server || got.ChangesLimits() != c.limits {
				t.Errorf("%q: %+v (limits %v), %v; want %q, kind %q, server %d, limits %v", c.line, got, got.ChangesLimits(), err, c.cmd, c.kind, c.server, c.limits)
			}
		case "-":
			if !errors.Is(err, ErrNotCommand) {
				t.Errorf("%q: %+v, %v; want ErrNotCommand", c.line, got, err)
			}
		default:
			if err == nil || errors.Is(err, ErrNotCommand) {
				t.Errorf("%q: %+v, %v; want an error naming its %s", c.line, got, err, c.err)
			}
		}
	}
	// A command's text is kept bounded, and valid UTF-8.
	long := "[2026-11-29 04:43:49.847 Control   527] Cmd:quit \xff" + string(make([]byte, 4*MaxCommandLine))
	if got, err := ParseCommand([]byte(long), time.UTC); err != nil || len(got.Line) > MaxCommandLine+2 || got.Kind != KindDaemon {
		t.Errorf("a long quit line: %d bytes kept, kind %q, %v", len(got.Line), got.Kind, err)
	}
}

func FuzzParseCommand(f *testing.F) {
	f.Add([]byte("[2026-11-29 04:43:49.847 Control   527] Cmd:set_active_thread_percentage 873 12"))
	f.Add([]byte("] Cmd:"))
	f.Fuzz(func(t *testing.T, line []byte) {
		c, err := ParseCommand(line, time.UTC)
		if err == nil && (c.Server < 0 || len(c.Line) > 3*MaxCommandLine || (c.Server > 0 && c.Kind != KindServer)) {
			t.Fatalf("%q read as %+v", line, c)
		}
	})
}

// TestWatched: the commands that change something are watched, questions
// and unknown commands not.
func TestWatched(t *testing.T) {
	for cmd, want := range map[string]bool{
		"quit": true, "set_default_active_thread_percentage 25": true, "set_active_thread_percentage 9 12": true,
		"terminate_client 9 7": true, "shutdown_server 9": true, "set_device_pinned_mem_limit 9 0 4G": true,
		"get_server_list": false, "get_default_active_thread_percentage": false, "ps": false, "nosuchcommand": false, "": false,
	} {
		if got := Watched(cmd); got != want {
			t.Errorf("Watched(%q) = %v, want %v", cmd, got, want)
		}
	}
}

// A flood of foreign commands is warned about foreignWarnings times a
// minute, the last warning saying so, the rest at debug.
func TestForeignWarningBudget(t *testing.T) {
	var b warnBudget
	now := time.Date(2026, 11, 29, 5, 0, 0, 0, time.UTC)
	warns, notes := 0, 0
	for range foreignWarnings + 5 {
		level, note := b.take(now)
		if level == slog.LevelWarn {
			warns++
		}
		if note != "" {
			notes++
		}
	}
	if warns != foreignWarnings || notes != 1 {
		t.Errorf("%d warnings, %d notes in a minute; want %d and 1", warns, notes, foreignWarnings)
	}
	if level, _ := b.take(now.Add(time.Minute)); level != slog.LevelWarn {
		t.Errorf("a minute later: %v, want a warning again", level)
	}
}
