// Package process runs the binaries under test as real processes, for the
// suites that start them (tests/e2e, tests/k8s): built once per test binary
// (Build, from TestMain), started in the background with their output kept
// (Start) and stopped when the test ends, and Eventually, the one poll of
// a condition under a bound; InNamespace, a test run again as root of a
// user and mount namespace of its own.
package process

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Binary is one binary to build: package Package of the module at Dir
// ("" is the current directory's), with Tags and LDFlags, cgo on or off.
type Binary struct {
	Dir, Package, Tags, LDFlags string
	CGO                         bool
}

// Build builds b into out.
func Build(b Binary, out string) error {
	args := []string{"build"}
	if b.Dir != "" {
		args = append(args, "-C", b.Dir)
	}
	if b.Tags != "" {
		args = append(args, "-tags", b.Tags)
	}
	if b.LDFlags != "" {
		args = append(args, "-ldflags="+b.LDFlags)
	}
	cmd := exec.Command("go", append(args, "-o", out, b.Package)...)
	cgo := "0"
	if b.CGO {
		cgo = "1"
	}
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo, "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	if o, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %v\n%s", b.Package, err, o)
	}
	return nil
}

// Options say how a process runs and stops.
type Options struct {
	// Env is added to the test's environment.
	Env []string
	// Grace is how long Stop gives SIGTERM before SIGKILL; 0 is 20s.
	Grace time.Duration
	// Lenient: a process that needed SIGKILL is no failure of the test
	// (otherwise stopping cleanly is part of the contract).
	Lenient bool
}

// Proc is a binary running in the background with its output kept.
type Proc struct {
	Cmd  *exec.Cmd
	opts Options
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

// Start starts the binary at path with args; it is stopped (Stop) when
// the test ends, its output logged when the test failed.
func Start(t testing.TB, o Options, path string, args ...string) *Proc {
	t.Helper()
	if o.Grace == 0 {
		o.Grace = 20 * time.Second
	}
	p := &Proc{Cmd: exec.Command(path, args...), opts: o, done: make(chan struct{})}
	p.Cmd.Env = append(os.Environ(), o.Env...)
	p.Cmd.Stdout, p.Cmd.Stderr = p, p
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", filepath.Base(path), err)
	}
	go func() { p.err = p.Cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.Stop(t)
		if t.Failed() {
			t.Logf("%s printed:\n%s", filepath.Base(path), p.Output())
		}
	})
	return p
}

func (p *Proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

// Output is everything the process printed so far.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// Stop sends SIGTERM and waits for the process; one that does not stop
// within Options.Grace is killed (and fails the test unless Lenient). It
// returns how the process ended.
func (p *Proc) Stop(t testing.TB) error {
	t.Helper()
	if p.Exited() {
		return p.err
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(p.opts.Grace):
		_ = p.Cmd.Process.Kill()
		<-p.done
		if !p.opts.Lenient {
			t.Errorf("%s did not stop on SIGTERM", p.Cmd.Path)
		}
		return p.err
	}
}

// Kill is kill -9, waited for.
func (p *Proc) Kill(t testing.TB) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

// Done is closed once the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Eventually polls cond every 100 ms until it holds, for at most within
// (a bound on a hang, not a measure of speed), and fails the test with
// what and cond's last word when it never does.
func Eventually(t testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
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
