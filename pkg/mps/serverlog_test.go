package mps

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

// both runs Follow on the control.log of a fresh directory, collecting
// the clients connecting and those whose context is up, in the order
// handed on.
type both struct {
	cl   *ClientLog
	mu   sync.Mutex
	seen []string // "new PID" or "active PID"
}

func followBoth(t *testing.T) (*both, string) {
	t.Helper()
	dir := t.TempDir()
	b := &both{cl: NewClientLog(filepath.Join(dir, "control.log"), nil)}
	b.cl.loc = time.UTC
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.cl.Follow(ctx, func(_ context.Context, l Lines) error {
			b.mu.Lock()
			defer b.mu.Unlock()
			for _, nc := range l.Clients {
				b.seen = append(b.seen, fmt.Sprintf("new %d", nc.PID))
			}
			for _, ac := range l.Active {
				b.seen = append(b.seen, fmt.Sprintf("active %d", ac.PID))
			}
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Follow did not return after its context ended")
		}
	})
	await(t, "following", func() bool { return b.cl.State().Following })
	return b, dir
}

func (b *both) waitFor(t *testing.T, want string) {
	t.Helper()
	await(t, want, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return strings.Contains(strings.Join(b.seen, ","), want)
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
	b, dir := followBoth(t)
	server := filepath.Join(dir, "server.log")
	appendTo(t, server, activeLine(70)) // made after following began: read
	b.waitFor(t, "active 70")
	appendTo(t, filepath.Join(dir, "control.log"), line(71))
	appendTo(t, server, "[2026-11-29 08:11:33.213 Server  1489] Client {PID: 71, Context ID: 0} connected\n"+activeLine(71))
	b.waitFor(t, "new 71,active 71")
	next := filepath.Join(dir, "server.log.new")
	appendTo(t, next, activeLine(72))
	if err := os.Rename(next, server); err != nil {
		t.Fatal(err)
	}
	b.waitFor(t, "active 72")
	if st := b.cl.State(); st.Clients != 1 || st.Active != 3 || st.Malformed != 0 {
		t.Errorf("state %+v", st)
	}
	appendTo(t, server, "[2026-11-29 08:11:33.225 Server  1489] Status of client {PID: x, Context ID: 1} is ACTIVE\n"+activeLine(73))
	b.waitFor(t, "active 73")
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
		b, dir := followBoth(t)
		appendTo(t, filepath.Join(dir, "server.log"), string(raw))
		b.waitFor(t, strings.Join(pids, ","))
		if st := b.cl.State(); st.Malformed != 0 || st.LongLines != 0 {
			t.Errorf("%s: state %+v", name, st)
		}
	}
}
