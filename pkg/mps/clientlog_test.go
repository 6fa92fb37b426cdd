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

	"golang.org/x/sys/unix"
)

// TestParseNewClient reads the lines real control daemons wrote
// (docs/gpu-runs/mps-probe*.txt), tells every other line apart, and names
// what is wrong with a NEW CLIENT line that cannot be read.
func TestParseNewClient(t *testing.T) {
	utc := time.UTC
	for _, c := range []struct {
		line string
		pid  int
		uid  int
		at   string
		err  string // "" ok; "-" not a NEW CLIENT line
	}{
		{"[2026-11-22 01:19:14.919 Control   411] NEW CLIENT 1240 from user 0: Server already exists", 1240, 0, "2026-11-22T01:19:14.919Z", ""},
		{"[2026-11-22 01:19:23.858 Control  1286] NEW CLIENT 1295 from user 0: Server is not ready, push client to pending list", 1295, 0, "2026-11-22T01:19:23.858Z", ""},
		{"[2026-11-27 23:41:44.986 Control   557] NEW CLIENT 813 from user 65534: Server already exists", 813, 65534, "2026-11-27T23:41:44.986Z", ""},
		{"[2026-11-22 00:54:43.826 Control   430] Cmd:get_server_list", 0, 0, "", "-"},
		{"[2026-11-22 00:54:43.825 Control   430] NEW UI", 0, 0, "", "-"},
		{"[2026-11-22 00:54:49.611 Control   430] User did not send valid credentials", 0, 0, "", "-"},
		{"[2026-11-22 00:54:49.878 Control   430] NEW SERVER 673: Ready", 0, 0, "", "-"},
		{"", 0, 0, "", "-"},
		{"\x00\xff garbage", 0, 0, "", "-"},
		{"[2026-11-22 01:19:14.919 Control   411] NEW CLIENT x from user 0: y", 0, 0, "", "PID"},
		{"[2026-11-22 01:19:14.919 Control   411] NEW CLIENT -5 from user 0: y", 0, 0, "", "PID"},
		{"[2026-11-22 01:19:14.919 Control   411] NEW CLIENT 0 from user 0: y", 0, 0, "", "PID"},
		{"[2026-11-22 01:19:14.919 Control   411] NEW CLIENT 99999999 from user 0: y", 0, 0, "", "PID"},
		{"[2026-11-22 01:19:14.919 Control   411] NEW CLIENT +7 from user 0: y", 0, 0, "", "PID"},
		{"[2026-13-22 01:19:14.919 Control   411] NEW CLIENT 7 from user 0: y", 0, 0, "", "time"},
		{"junk] NEW CLIENT 7 from user 0", 0, 0, "", "no time"},
		// A header too short for its time, in a line long enough for one
		// (a torn or foreign line): an error, not a panic.
		{"[2026-11-22] NEW CLIENT 7 from user 0: Server already exists", 0, 0, "", "no time"},
		// What a client sends the control daemon is logged after a header
		// of its own: a NEW CLIENT line forged inside a command is none.
		{"[2026-11-22 00:54:43.902 Control   430] Cmd:x] NEW CLIENT 1 from user 0: Server already exists", 0, 0, "", "-"},
		{"[2026-11-22 00:54:43.902 Control   430] Unknown command \"x] NEW CLIENT 1 from user 0\"", 0, 0, "", "-"},
		{"[2026-11-22 00:54:43.902 Server    430] NEW CLIENT 1 from user 0: y", 0, 0, "", "-"},
		{"[2026-11-22 01:19:14.919 Control   411] NEW CLIENT 7 from user x: y", 7, -1, "2026-11-22T01:19:14.919Z", ""},
	} {
		nc, err := ParseNewClient([]byte(c.line), utc)
		switch c.err {
		case "":
			if err != nil || nc.PID != c.pid || nc.UID != c.uid || nc.At.Format("2006-01-02T15:04:05.000Z07:00") != c.at {
				t.Errorf("%q: %+v, %v; want PID %d, UID %d at %s", c.line, nc, err, c.pid, c.uid, c.at)
			}
		case "-":
			if !errors.Is(err, ErrNotNewClient) {
				t.Errorf("%q: %+v, %v; want ErrNotNewClient", c.line, nc, err)
			}
		default:
			if err == nil || errors.Is(err, ErrNotNewClient) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %+v, %v; want an error naming %s", c.line, nc, err, c.err)
			}
		}
	}
}

func FuzzParseNewClient(f *testing.F) {
	f.Add([]byte("[2026-11-22 01:19:14.919 Control   411] NEW CLIENT 1240 from user 0: Server already exists"))
	f.Add([]byte("] NEW CLIENT "))
	f.Add([]byte("[2026-11-22] NEW CLIENT 7 from user 0: Server already exists"))
	f.Fuzz(func(t *testing.T, line []byte) {
		nc, err := ParseNewClient(line, time.UTC)
		if err == nil && (nc.PID <= 0 || nc.PID > maxPID) {
			t.Fatalf("%q read as PID %d", line, nc.PID)
		}
	})
}

// followed runs a ClientLog on path, collecting what it hands on: the
// clients connecting (got) and, in order with them, every client handed
// on as "new PID" or, from server.log, "active PID" (seen).
type followed struct {
	cl     *ClientLog
	mu     sync.Mutex
	got    []NewClient
	seen   []string
	notify chan struct{}
	block  chan struct{} // while open, send waits on it
}

func follow(t *testing.T, path string) *followed {
	t.Helper()
	f := &followed{cl: NewClientLog(path, nil), notify: make(chan struct{}, 1)}
	f.cl.loc = time.UTC
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.cl.Follow(ctx, func(ctx context.Context, l Lines) error {
			f.mu.Lock()
			block := f.block
			f.mu.Unlock()
			if block != nil {
				select {
				case <-block:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			f.mu.Lock()
			f.got = append(f.got, l.Clients...)
			for _, nc := range l.Clients {
				f.seen = append(f.seen, fmt.Sprintf("new %d", nc.PID))
			}
			for _, ac := range l.Active {
				f.seen = append(f.seen, fmt.Sprintf("active %d", ac.PID))
			}
			f.mu.Unlock()
			select {
			case f.notify <- struct{}{}:
			default:
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
	return f
}

// await waits until cond holds; a test fails after a long bound rather
// than hang (nothing here is timed).
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (f *followed) pids() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for _, nc := range f.got {
		out = append(out, nc.PID)
	}
	return out
}

func (f *followed) waitPIDs(t *testing.T, want ...int) {
	t.Helper()
	await(t, fmt.Sprintf("clients %v handed on", want), func() bool { return fmt.Sprint(f.pids()) == fmt.Sprint(want) })
}

func line(pid int) string {
	return fmt.Sprintf("[2026-11-27 23:41:37.724 Control   557] NEW CLIENT %d from user 0: Server already exists\n", pid)
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func startFollowing(t *testing.T, existing string) (*followed, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "control.log")
	if existing != "" {
		appendTo(t, path, existing)
	}
	f := follow(t, path)
	await(t, "following", func() bool { return f.cl.State().Following })
	// What was there before is history: a line written now is the first
	// handed on (the probe line proves the follower has its offset).
	appendTo(t, path, line(1))
	f.waitPIDs(t, 1)
	return f, path
}

func TestClientLogHandsOnNewClientsOnly(t *testing.T) {
	f, path := startFollowing(t, line(90)+"[2026-11-27 23:41:37.724 Control   557] Cmd:get_server_list\n")
	appendTo(t, path, "[2026-11-27 23:41:37.724 Control   557] NEW UI\n"+line(2)+"[2026-11-27 23:41:37.724 Control   557] UI closed\n"+line(2))
	f.waitPIDs(t, 1, 2, 2)
	if st := f.cl.State(); st.Clients != 3 || st.Malformed != 0 || st.Error != "" {
		t.Errorf("state %+v", st)
	}
}

// A hundred clients at once: every line handed on, in order.
func TestClientLogLosesNoLineOfABurst(t *testing.T) {
	f, path := startFollowing(t, "")
	var b strings.Builder
	want := []int{1}
	for pid := 100; pid < 200; pid++ {
		b.WriteString(line(pid))
		want = append(want, pid)
	}
	appendTo(t, path, b.String())
	f.waitPIDs(t, want...)
}

// A consumer that does not keep up holds the follower back; nothing is
// dropped meanwhile, and a line written in pieces is read whole.
func TestClientLogWaitsForASlowConsumer(t *testing.T) {
	f, path := startFollowing(t, "")
	block := make(chan struct{})
	f.mu.Lock()
	f.block = block
	f.mu.Unlock()
	appendTo(t, path, line(2))
	half := line(3)
	appendTo(t, path, half[:20])
	appendTo(t, path, half[20:]+line(4))
	close(block)
	await(t, "clients 2, 3, 4", func() bool {
		p := f.pids()
		return len(p) == 4 && p[1] == 2 && p[2] == 3 && p[3] == 4
	})
}

func TestClientLogSkipsLongLinesAndReportsMalformedOnes(t *testing.T) {
	f, path := startFollowing(t, "")
	appendTo(t, path, strings.Repeat("x", 3*logChunk)+line(5)+"[2026-11-27 23:41:37.724 Control   557] NEW CLIENT abc from user 0\n"+
		strings.Repeat("y", MaxLogLine+1)+"\n"+line(6))
	f.waitPIDs(t, 1, 6)
	st := f.cl.State()
	if st.LongLines != 2 || st.Malformed != 1 || !strings.Contains(st.Trouble, "control.log: a line longer than") {
		t.Errorf("state %+v; want 2 long lines (the first swallowing client 5's line) and 1 malformed", st)
	}
}

func TestClientLogFollowsTruncationAndReplacement(t *testing.T) {
	f, path := startFollowing(t, "")
	// copytruncate: the same file, emptied, written again.
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	appendTo(t, path, line(7))
	f.waitPIDs(t, 1, 7)
	// Replaced by a new file renamed over it: read from its start.
	tmp := path + ".new"
	appendTo(t, tmp, line(8)+line(9))
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	f.waitPIDs(t, 1, 7, 8, 9)
	if st := f.cl.State(); st.Restarts != 2 {
		t.Errorf("state %+v; want 2 restarts", st)
	}
}

// logrotate's rename and create: the daemon keeps writing the renamed file
// until it starts again and writes the new one.
func TestClientLogFollowsARotation(t *testing.T) {
	f, path := startFollowing(t, "")
	daemon, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer daemon.Close()
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	appendTo(t, path, "")
	if _, err := daemon.WriteString(line(10)); err != nil {
		t.Fatal(err)
	}
	f.waitPIDs(t, 1, 10)
	appendTo(t, path, line(11))
	f.waitPIDs(t, 1, 10, 11)
}

// A log directory that does not exist yet (the control daemon not started)
// is watched once it does, and its new file read from the start.
func TestClientLogWaitsForItsDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log", "GPU-x")
	path := filepath.Join(dir, "control.log")
	f := follow(t, path)
	await(t, "the missing directory reported", func() bool {
		st := f.cl.State()
		return !st.Following && strings.Contains(st.Error, dir)
	})
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	await(t, "following", func() bool { return f.cl.State().Following })
	appendTo(t, path, line(12))
	f.waitPIDs(t, 12)
	// The directory removed and made again (a reload, a cleanup).
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	await(t, "the directory's loss seen", func() bool { return !f.cl.State().Following })
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	await(t, "following again", func() bool { return f.cl.State().Following })
	appendTo(t, path, line(13))
	f.waitPIDs(t, 12, 13)
}

// A FIFO where control.log belongs is never opened for reading (that would
// block), and reported.
func TestClientLogRefusesAFIFO(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "control.log")
	if err := mkfifo(path); err != nil {
		t.Skip("no FIFO here:", err)
	}
	f := follow(t, path)
	await(t, "the FIFO reported", func() bool { return strings.Contains(f.cl.State().Trouble, "not a regular file") })
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	appendTo(t, path, line(14))
	f.waitPIDs(t, 14)
}

// The lines a real control daemon wrote (docs/gpu-runs/mps-probe-escape's
// control.log) hand on each client of the probe.
func TestClientLogReadsARealControlLog(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "control-escape.log"))
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	for sc.Scan() {
		if nc, err := ParseNewClient(sc.Bytes(), time.UTC); err == nil {
			want = append(want, nc.PID)
		}
	}
	if len(want) != 50 {
		t.Fatalf("%d NEW CLIENT lines in the probe's log, want 50", len(want))
	}
	f, path := startFollowing(t, "")
	appendTo(t, path, string(raw))
	f.waitPIDs(t, append([]int{1}, want...)...)
	if st := f.cl.State(); st.Malformed != 0 || st.LongLines != 0 {
		t.Errorf("state %+v", st)
	}
}

func mkfifo(path string) error { return unix.Mkfifo(path, 0o644) }

// A log whose history ends inside a line (the daemon was writing it as
// following began): the rest of that line is history too, not a line of
// its own (read alone it is a NEW CLIENT line without its header: counted
// malformed, warned of).
func TestClientLogSkipsTheRestOfAHistoryLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "control.log")
	half := line(90)
	cut := strings.Index(half, "]")
	appendTo(t, path, line(89)+half[:cut])
	f := follow(t, path)
	await(t, "following", func() bool { return f.cl.State().Following })
	appendTo(t, path, half[cut:]+line(2))
	f.waitPIDs(t, 2)
	if st := f.cl.State(); st.Malformed != 0 || st.Clients != 1 {
		t.Errorf("state %+v; want client 2 alone, nothing malformed", st)
	}
}
