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
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/process"
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
	for _, b := range []struct {
		name string
		cgo  bool
	}{{"mps-daemon", true}, {"mps-inventory", false}, {"mpsctl", false}} {
		// The tags and the stripping (-s -w) `make build` ships the
		// binaries with; with those tags the compiles are make nocgo's
		// (cgo on or off alike), not one more set, and a stripped link
		// takes a third less CPU.
		bin := process.Binary{Package: "yunion.io/x/mps-daemon/cmd/" + b.name, Tags: "netgo,osusergo", LDFlags: "-s -w", CGO: b.cgo}
		if err := process.Build(bin, filepath.Join(dir, b.name)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	binDir = dir
	return m.Run()
}

// proc is a binary running in the background with its output kept
// (internal/testsupport/process): stopping cleanly on SIGTERM is part of
// the contract.
type proc struct{ *process.Proc }

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startEnv(t, nil, name, args...)
}

// startEnv starts a binary with extra environment variables.
func startEnv(t *testing.T, env []string, name string, args ...string) *proc {
	t.Helper()
	return &proc{process.Start(t, process.Options{Env: env}, filepath.Join(binDir, name), args...)}
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

// logs waits until the process has written a line containing want: its
// output comes through a pipe, so a line written before a state the test
// saw over HTTP or in a file can still be on its way.
func (p *proc) logs(t *testing.T, want string) {
	t.Helper()
	eventually(t, fmt.Sprintf("a log line with %q", want), func() (bool, string) {
		return strings.Contains(p.Output(), want), p.Output()
	})
}

// eventually polls cond until it holds or the deadline passes. The deadline
// is generous: it bounds a hang, it does not measure speed.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	process.Eventually(t, 60*time.Second, what, cond)
}

// eventuallyWithin is eventually with a bound of its own.
func eventuallyWithin(t *testing.T, bound time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	process.Eventually(t, bound, what, cond)
}
