package pgtest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// envHolder makes TestClusterHolder start a cluster and wait to be killed.
const envHolder = "PGTEST_HOLDER"

// TestClusterHolder is the child of TestKilledTestProcessLeavesNoServer.
func TestClusterHolder(t *testing.T) {
	if os.Getenv(envHolder) != "1" {
		t.Skip("runs as a child of TestKilledTestProcessLeavesNoServer")
	}
	DSN(t)
	srv, err := serverFor(t)
	if err != nil {
		t.Fatal(err)
	}
	dir := srv.cluster.dir
	fmt.Printf("CLUSTER=%s\n", dir)
	time.Sleep(10 * time.Minute)
}

// A test binary killed with SIGKILL runs no cleanup; its server must go down
// all the same, and the next run sweeps the directory it left.
func TestKilledTestProcessLeavesNoServer(t *testing.T) {
	if _, err := findBinaries(); err != nil {
		t.Skipf("no local PostgreSQL binaries: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestClusterHolder$", "-test.v")
	cmd.Env = append(os.Environ(), envHolder+"=1", EnvDSN+"=")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	dir := ""
	for sc := bufio.NewScanner(out); dir == "" && sc.Scan(); {
		if d, ok := strings.CutPrefix(sc.Text(), "CLUSTER="); ok {
			dir = d
		}
	}
	if dir == "" {
		t.Fatal("the child printed no cluster directory")
	}
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(first)
	if err != nil || !alive(pid) {
		t.Fatalf("postmaster pid %q (%v) not running while the child holds it", first, err)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// Bounded wait for an exit that is underway (immediate shutdown), not a
	// measure of speed.
	for deadline := time.Now().Add(60 * time.Second); alive(pid); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("postmaster %d still runs after its test process was killed", pid)
		}
	}
	sweepStale()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("sweepStale left %s (stat: %v)", dir, err)
	}
}
