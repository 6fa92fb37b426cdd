package cloudpods

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

var extraHosts atomic.Int32

// TestControlPlane: the real climc lists through the real region, and a
// host created as Cloudpods' host agent creates one shows in host-list.
func TestControlPlane(t *testing.T) {
	c := Get(t)
	ctx := context.Background()
	out, errOut, err := c.RunClimc(ctx, "host-list")
	if err != nil {
		t.Fatalf("climc host-list: %v\n%s", err, errOut)
	}
	if !strings.Contains(out, c.HostID) || !strings.Contains(out, c.HostName) {
		t.Fatalf("host-list lacks the script's host %s (%s):\n%s", c.HostName, c.HostID, out)
	}
	// A name, MAC and address of this run's own: the region refuses a
	// second host with any of them, and -count=N runs this N times on one
	// control plane.
	n := extraHosts.Add(1)
	name := fmt.Sprintf("gpuhost-extra-%d", n)
	id, err := c.CreateHost(ctx, name, fmt.Sprintf("02:00:00:22:%02x:%02x", n>>8&0xff, n&0xff), fmt.Sprintf("127.2.%d.%d", n>>8&0xff, n&0xff))
	if err != nil {
		t.Fatal(err)
	}
	out, _, err = c.RunClimc(ctx, "host-show", name)
	if err != nil || !strings.Contains(out, id) {
		t.Fatalf("host-show %s: %v\n%s", name, err, out)
	}
}

// A test process that ends without stopping its control plane (go test's
// -timeout panics it, or it is killed) leaves nothing running: the guard
// runs scripts/cloudpods.sh down WORK --purge. A stand-in script records
// the call.
func TestGuardStopsAnAbandonedControlPlane(t *testing.T) {
	if dir := os.Getenv("MPS_TEST_GUARD_DIR"); dir != "" { // the abandoning process
		if _, err := startGuard(filepath.Join(dir, "cloudpods.sh"), filepath.Join(dir, "work")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(0) // no Stop, no disarm
	}
	dir := t.TempDir()
	script := "#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/stopped.tmp\" && mv \"$(dirname \"$0\")/stopped.tmp\" \"$(dirname \"$0\")/stopped\"\n"
	if err := os.WriteFile(filepath.Join(dir, "cloudpods.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestGuardStopsAnAbandonedControlPlane$")
	cmd.Env = append(os.Environ(), "MPS_TEST_GUARD_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the abandoning process: %v\n%s", err, out)
	}
	want := "down " + filepath.Join(dir, "work") + " --purge\n"
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		b, err := os.ReadFile(filepath.Join(dir, "stopped"))
		if err == nil {
			if string(b) != want {
				t.Fatalf("the script ran with %q, want %q", b, want)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the guard did not run the script after its process ended")
		case <-time.After(20 * time.Millisecond):
		}
	}

	// Disarmed (Stop ran the script itself), the guard is gone and can
	// run nothing.
	if err := os.Remove(filepath.Join(dir, "stopped")); err != nil {
		t.Fatal(err)
	}
	g, err := startGuard(filepath.Join(dir, "cloudpods.sh"), filepath.Join(dir, "work"))
	if err != nil {
		t.Fatal(err)
	}
	g.disarm()
	if _, err := os.Stat(filepath.Join(dir, "stopped")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a disarmed guard ran the script: %v", err)
	}
}
