package mps

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestParseActiveClient reads the ACTIVE lines a real MPS server wrote
// (docs/gpu-runs/probe-wedge-2026-11-29.txt), tells every other line
// apart, and names what is wrong with an ACTIVE line that cannot be read.
func TestParseActiveClient(t *testing.T) {
	for _, c := range []struct {
		line string
		pid  int
		ctx  int
		at   string
		err  string // "" ok; "-" not an ACTIVE line
	}{
		{"[2026-11-29 08:11:33.225 Server  1489] Status of client {PID: 2359, Context ID: 1} is ACTIVE", 2359, 1, "2026-11-29T08:11:33.225Z", ""},
		{"[2026-11-29 08:11:15.070 Server  1489] Status of client {PID: 1486, Context ID: 12} is ACTIVE", 1486, 12, "2026-11-29T08:11:15.070Z", ""},
		{"[2026-11-29 08:11:33.213 Server  1489] Client {PID: 2359, Context ID: 0} connected", 0, 0, "", "-"},
		{"[2026-11-29 08:10:02.123 Server   567] User did not send valid credentials", 0, 0, "", "-"},
		{"[2026-11-29 08:11:14.737 Other  1489] Startup", 0, 0, "", "-"},
		{"[2026-11-29 08:11:33.225 Control  1489] Status of client {PID: 2359, Context ID: 1} is ACTIVE", 0, 0, "", "-"},
		{"[2026-11-29 08:11:33.225 Server  1489] Status of client {PID: 2359, Context ID: 1} is ACTIVE and more", 0, 0, "", "-"},
		{"", 0, 0, "", "-"},
		{"] Status of client {PID: 1, Context ID: 1} is ACTIVE", 0, 0, "", "-"},
		{"[2026-11-29 08:11:33.225 Server  1489] Status of client {PID: x, Context ID: 1} is ACTIVE", 0, 0, "", "PID"},
		{"[2026-11-29 08:11:33.225 Server  1489] Status of client {PID: 0, Context ID: 1} is ACTIVE", 0, 0, "", "PID"},
		{"[2026-11-29 08:11:33.225 Server  1489] Status of client {PID: 99999999, Context ID: 1} is ACTIVE", 0, 0, "", "PID"},
		{"[2026-11-29 08:11:33.225 Server  1489] Status of client {PID: 5} is ACTIVE", 0, 0, "", "PID"},
		{"[2026-11-29 08:11:33.225 Server  1489] Status of client {PID: 5, Context ID: -1} is ACTIVE", 0, 0, "", "context"},
		{"[2026-13-29 08:11:33.225 Server  1489] Status of client {PID: 5, Context ID: 1} is ACTIVE", 0, 0, "", "time"},
	} {
		ac, err := ParseActiveClient([]byte(c.line), time.UTC)
		switch c.err {
		case "":
			if err != nil || ac.PID != c.pid || ac.Context != c.ctx || ac.At.Format("2006-01-02T15:04:05.000Z07:00") != c.at {
				t.Errorf("%q: %+v, %v; want PID %d, context %d at %s", c.line, ac, err, c.pid, c.ctx, c.at)
			}
		case "-":
			if !errors.Is(err, ErrNotActiveClient) {
				t.Errorf("%q: %+v, %v; want ErrNotActiveClient", c.line, ac, err)
			}
		default:
			if err == nil || errors.Is(err, ErrNotActiveClient) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %+v, %v; want an error naming %s", c.line, ac, err, c.err)
			}
		}
	}
}

func FuzzParseActiveClient(f *testing.F) {
	f.Add([]byte("[2026-11-29 08:11:33.225 Server  1489] Status of client {PID: 2359, Context ID: 1} is ACTIVE"))
	f.Add([]byte("] Status of client {PID: } is ACTIVE"))
	f.Fuzz(func(t *testing.T, line []byte) {
		ac, err := ParseActiveClient(line, time.UTC)
		if err == nil && (ac.PID <= 0 || ac.PID > maxPID || ac.Context < 0) {
			t.Fatalf("%q read as %+v", line, ac)
		}
	})
}

// followDir follows the control.log of a fresh directory (and so the
// server.log beside it), from when it is followed.
func followDir(t *testing.T) (*followed, string) {
	t.Helper()
	dir := t.TempDir()
	f := follow(t, filepath.Join(dir, "control.log"))
	await(t, "following", func() bool { return f.cl.State().Following })
	return f, dir
}

// waitSeen waits until the clients handed on hold want, in that order.
func (f *followed) waitSeen(t *testing.T, want string) {
	t.Helper()
	await(t, want, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return strings.Contains(strings.Join(f.seen, ","), want)
	})
}

func activeLine(pid int) string {
	return fmt.Sprintf("[2026-11-29 08:11:33.225 Server  1489] Status of client {PID: %d, Context ID: 1} is ACTIVE\n", pid)
}

// A client's ACTIVE line in server.log is handed on after its NEW CLIENT
// line, as the two daemons write them; server.log's history is not read,
// and a server.log replaced (a control daemon started again) is read from
// its start.
func TestClientLogHandsOnActiveClients(t *testing.T) {
	b, dir := followDir(t)
	server := filepath.Join(dir, "server.log")
	appendTo(t, server, activeLine(70)) // made after following began: read
	b.waitSeen(t, "active 70")
	appendTo(t, filepath.Join(dir, "control.log"), line(71))
	appendTo(t, server, "[2026-11-29 08:11:33.213 Server  1489] Client {PID: 71, Context ID: 0} connected\n"+activeLine(71))
	b.waitSeen(t, "new 71,active 71")
	next := filepath.Join(dir, "server.log.new")
	appendTo(t, next, activeLine(72))
	if err := os.Rename(next, server); err != nil {
		t.Fatal(err)
	}
	b.waitSeen(t, "active 72")
	if st := b.cl.State(); st.Clients != 1 || st.Active != 3 || st.Malformed != 0 {
		t.Errorf("state %+v", st)
	}
	appendTo(t, server, "[2026-11-29 08:11:33.225 Server  1489] Status of client {PID: x, Context ID: 1} is ACTIVE\n"+activeLine(73))
	b.waitSeen(t, "active 73")
	if st := b.cl.State(); st.Malformed != 1 || !strings.Contains(st.Trouble, "server.log") {
		t.Errorf("a malformed ACTIVE line: state %+v", st)
	}
}

// The server.log lines a real server wrote (docs/gpu-runs/
// probe-wedge-2026-11-29.txt): every client whose context came up is
// handed on, and no escaper killed before its context was.
func TestClientLogReadsARealServerLog(t *testing.T) {
	for name, want := range map[string]int{"server-killed-with-context.log": 12, "server-killed-at-connect.log": 3} {
		raw, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		var pids []string
		sc := bufio.NewScanner(strings.NewReader(string(raw)))
		for sc.Scan() {
			if ac, err := ParseActiveClient(sc.Bytes(), time.UTC); err == nil {
				pids = append(pids, fmt.Sprintf("active %d", ac.PID))
			}
		}
		if len(pids) != want {
			t.Fatalf("%s: %d ACTIVE lines, want %d", name, len(pids), want)
		}
		b, dir := followDir(t)
		appendTo(t, filepath.Join(dir, "server.log"), string(raw))
		b.waitSeen(t, strings.Join(pids, ","))
		if st := b.cl.State(); st.Malformed != 0 || st.LongLines != 0 {
			t.Errorf("%s: state %+v", name, st)
		}
	}
}

// A FIFO where server.log belongs is never opened for reading, and
// reported naming server.log; control.log beside it is followed all the
// same, and server.log once a file is there.
func TestClientLogRefusesAFIFOAtServerLog(t *testing.T) {
	dir := t.TempDir()
	server := filepath.Join(dir, "server.log")
	if err := mkfifo(server); err != nil {
		t.Skip("no FIFO here:", err)
	}
	b := follow(t, filepath.Join(dir, "control.log"))
	await(t, "the FIFO reported", func() bool {
		return strings.Contains(b.cl.State().Trouble, "server.log is not a regular file")
	})
	appendTo(t, filepath.Join(dir, "control.log"), line(80))
	b.waitSeen(t, "new 80")
	if err := os.Remove(server); err != nil {
		t.Fatal(err)
	}
	appendTo(t, server, activeLine(80))
	b.waitSeen(t, "new 80,active 80")
}
