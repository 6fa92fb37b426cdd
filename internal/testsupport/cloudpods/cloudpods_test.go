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
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

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
	id, err := c.CreateHost(ctx, "gpuhost-extra", "02:00:00:00:00:77", "127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	out, _, err = c.RunClimc(ctx, "host-show", "gpuhost-extra")
	if err != nil || !strings.Contains(out, id) {
		t.Fatalf("host-show gpuhost-extra: %v\n%s", err, out)
	}
}

// A test process that ends without stopping its control plane (go test's
// -timeout panics it, or it is killed) leaves nothing running: the guard
// runs cloudpods-down.sh WORK --purge. A stand-in script records the call.
func TestGuardStopsAnAbandonedControlPlane(t *testing.T) {
	if dir := os.Getenv("MPS_TEST_GUARD_DIR"); dir != "" { // the abandoning process
		if _, err := startGuard(dir, filepath.Join(dir, "work")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(0) // no Stop, no disarm
	}
	dir := t.TempDir()
	script := "#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/stopped.tmp\" && mv \"$(dirname \"$0\")/stopped.tmp\" \"$(dirname \"$0\")/stopped\"\n"
	if err := os.WriteFile(filepath.Join(dir, "cloudpods-down.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestGuardStopsAnAbandonedControlPlane$")
	cmd.Env = append(os.Environ(), "MPS_TEST_GUARD_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the abandoning process: %v\n%s", err, out)
	}
	want := filepath.Join(dir, "work") + " --purge\n"
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		b, err := os.ReadFile(filepath.Join(dir, "stopped"))
		if err == nil {
			if string(b) != want {
				t.Fatalf("cloudpods-down.sh ran with %q, want %q", b, want)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the guard did not run cloudpods-down.sh after its process ended")
		case <-time.After(20 * time.Millisecond):
		}
	}

	// Disarmed (Stop ran the script itself), the guard is gone and can
	// run nothing.
	if err := os.Remove(filepath.Join(dir, "stopped")); err != nil {
		t.Fatal(err)
	}
	g, err := startGuard(dir, filepath.Join(dir, "work"))
	if err != nil {
		t.Fatal(err)
	}
	g.disarm()
	if _, err := os.Stat(filepath.Join(dir, "stopped")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a disarmed guard ran the script: %v", err)
	}
}
