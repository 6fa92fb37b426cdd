package mps_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
)

func simController(t *testing.T) (*mpssim.Runner, *mps.Controller, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "mpss")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	r := mpssim.New(nil)
	c := mps.NewController(r, mps.Env{PipeDir: dir + "/p", LogDir: dir + "/l", VisibleDevices: "GPU-x"}, 5*time.Second, nil)
	if _, err := c.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r, c, dir + "/p"
}

func TestRunningServerLimitsChangeForLaterClients(t *testing.T) {
	ctx := context.Background()
	r, c, pipe := simController(t)
	if err := c.SetDefaults(ctx, mps.Limits{MemoryLimit: 35942, ThreadPercentage: 25}); err != nil {
		t.Fatal(err)
	}
	srv, err := r.AddClient(pipe, 101)
	if err != nil {
		t.Fatal(err)
	}
	// Resize 4 -> 2: new defaults do not reach the running server...
	if err := c.SetDefaults(ctx, mps.Limits{MemoryLimit: 71885, ThreadPercentage: 50}); err != nil {
		t.Fatal(err)
	}
	got, err := c.ServerLimits(ctx, srv)
	if err != nil || !mps.LimitsMatch(got, mps.Limits{MemoryLimit: 35942, ThreadPercentage: 25}) {
		t.Fatalf("running server should keep its limits until told: %+v %v", got, err)
	}
	// ...until they are set on it.
	want := mps.Limits{MemoryLimit: 71885, ThreadPercentage: 50}
	if err := c.SetServerLimits(ctx, srv, want); err != nil {
		t.Fatal(err)
	}
	if enf, err := r.EnforcedLimits(pipe, srv); err != nil || enf.MemoryLimit != 71885 || enf.ThreadPercentage != 50 {
		t.Fatalf("server enforces %+v (%v), want %+v exactly", enf, err, want)
	}
	if err := c.SetServerLimits(ctx, srv, mps.Limits{MemoryLimit: 1, ThreadPercentage: 0}); err == nil {
		t.Error("a 0% thread percentage must be refused")
	}
	if err := c.SetServerLimits(ctx, 999, want); !errors.Is(err, mps.ErrServerNotFound) {
		t.Errorf("unknown server: %v, want ErrServerNotFound", err)
	}
}

func TestFaultedServerRecoversWhenItsClientsAreGone(t *testing.T) {
	ctx := context.Background()
	r, c, pipe := simController(t)
	srv, _ := r.AddClient(pipe, 201)
	if _, err := r.AddClient(pipe, 202); err != nil {
		t.Fatal(err)
	}
	if st, err := c.ServerStatus(ctx, srv); err != nil || st != mps.ServerActive {
		t.Fatalf("status %q %v, want ACTIVE", st, err)
	}
	if err := r.Fault(pipe, 202); err != nil {
		t.Fatal(err)
	}
	st, _ := c.ServerStatus(ctx, srv)
	clients, _ := c.Clients(ctx, srv)
	if st != mps.ServerFault || len(clients) != 1 || clients[0] != 202 {
		t.Fatalf("after a fault: status %q clients %v; want FAULT with only the faulting client left", st, clients)
	}
	if err := r.RemoveClient(pipe, 202); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.ServerStatus(ctx, srv); st != mps.ServerActive {
		t.Fatalf("status %q after the last client left, want ACTIVE", st)
	}
}
