// Package e2e runs the three binaries as real processes on loopback: the
// inventory with a SQLite file, the daemon on a simulated host, mpsctl as a
// user types it. The binaries are built once per run from this checkout.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binDir holds the binaries under test; set in TestMain.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if d := os.Getenv("E2E_BIN_DIR"); d != "" {
		binDir = d
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "mps-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	for _, b := range []struct{ name, cgo string }{{"mps-daemon", "1"}, {"mps-inventory", "0"}, {"mpsctl", "0"}} {
		// The tags and the stripping (-s -w) `make build` ships the
		// binaries with; with those tags the compiles are make nocgo's
		// (cgo on or off alike), not one more set, and a stripped link
		// takes a third less CPU.
		cmd := exec.Command("go", "build", "-tags", "netgo,osusergo", "-ldflags=-s -w", "-o", filepath.Join(dir, b.name), "yunion.io/x/mps-daemon/cmd/"+b.name)
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo, "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", b.name, err, out)
			return 1
		}
	}
	binDir = dir
	return m.Run()
}

// proc is a binary running in the background with its output kept.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

// Output is everything the process printed so far.
func (p *proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startEnv(t, nil, name, args...)
}

// startEnv starts a binary with extra environment variables.
func startEnv(t *testing.T, env []string, name string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(filepath.Join(binDir, name), args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.Output())
		}
	})
	return p
}

// stop sends SIGTERM and waits; a process that does not stop within 20s is
// killed and the test fails: stopping cleanly is part of the contract.
func (p *proc) stop(t *testing.T) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("%s did not stop on SIGTERM", p.cmd.Path)
		return p.err
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// run runs a binary to completion and returns stdout, stderr and the exit code.
func run(t *testing.T, env []string, name string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, name), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("running %s %s: %v", name, strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	return stdout.String(), stderr.String(), code
}

// eventually polls cond until it holds or the deadline passes. The deadline
// is generous: it bounds a hang, it does not measure speed.
// logs waits until the process has written a line containing want: its
// output comes through a pipe, so a line written before a state the test
// saw over HTTP or in a file can still be on its way.
func (p *proc) logs(t *testing.T, want string) {
	t.Helper()
	eventually(t, fmt.Sprintf("a log line with %q", want), func() (bool, string) {
		return strings.Contains(p.Output(), want), p.Output()
	})
}

func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	eventuallyWithin(t, 60*time.Second, what, cond)
}

// eventuallyWithin is eventually with a bound of its own.
func eventuallyWithin(t *testing.T, bound time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(bound)
	last := ""
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not reached; last: %s", what, last)
}
