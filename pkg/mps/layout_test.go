package mps_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
	"yunion.io/x/mps-daemon/pkg/units"
)

// A mixed two-GPU host: A (an older, slower GPU) has the lower PCI address,
// so nvidia-smi numbers it 0; CUDA puts the faster B first.
const (
	gpuA = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
	gpuB = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
)

func mixedHost(t *testing.T) (*mpssim.Runner, mps.Env) {
	t.Helper()
	r := mpssim.New(nil)
	r.SetCUDAOrder([]string{gpuB, gpuA})
	dir := t.TempDir()
	return r, mps.Env{PipeDir: filepath.Join(dir, "pipe"), LogDir: filepath.Join(dir, "log")}
}

// The single layout: the daemon is started with the UUIDs in a chosen
// order, and each GPU's cap is set on its place in that list. A client's
// server enforces A's cap on A and B's on B.
func TestSingleLayoutCapsLandOnTheirGPU(t *testing.T) {
	r, env := mixedHost(t)
	env.VisibleDevices, env.Single = mps.VisibleList([]string{gpuA, gpuB}), true
	ctx := context.Background()
	base := mps.NewController(r, env, 5*time.Second, nil)
	caps := map[string]units.MiB{gpuA: 11264, gpuB: 40960}
	for _, uuid := range []string{gpuA, gpuB} {
		i, ok := mps.Ordinal(env.VisibleDevices, uuid)
		if !ok {
			t.Fatalf("%s not in %s", uuid, env.VisibleDevices)
		}
		c := base.ForDevice(i)
		if _, err := c.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.SetDefaults(ctx, mps.Limits{MemoryLimit: caps[uuid], ThreadPercentage: 50}); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := r.AddClient(env.PipeDir, 4242)
	if err != nil {
		t.Fatal(err)
	}
	for uuid, want := range caps {
		got, err := r.EnforcedLimitsOn(env.PipeDir, srv, uuid)
		if err != nil {
			t.Fatal(err)
		}
		if got.MemoryLimit != want {
			t.Errorf("%s: server enforces %d MiB, want %d", uuid, got.MemoryLimit, want)
		}
	}
	// Read back per device, through the controllers.
	if l, err := base.ForDevice(1).Defaults(ctx); err != nil || mps.DisplayMemLimit(l.MemoryLimit) != mps.DisplayMemLimit(caps[gpuB]) {
		t.Errorf("device 1 defaults %+v (%v), want B's cap", l, err)
	}
}

// What Cloudpods' own mps-daemon does: no CUDA_VISIBLE_DEVICES, caps set on
// nvidia-smi's index. On this host A's cap lands on B and B's on A: the
// simulation tells the two apart, which is what makes the test above mean
// something.
func TestNvidiaSmiIndexOnCUDAOrderMisplacesCaps(t *testing.T) {
	r, env := mixedHost(t)
	ctx := context.Background()
	base := mps.NewController(r, env, 5*time.Second, nil)
	smiIndex := map[string]int{gpuA: 0, gpuB: 1} // PCI order
	caps := map[string]units.MiB{gpuA: 11264, gpuB: 40960}
	for uuid, idx := range smiIndex {
		c := base.ForDevice(idx)
		if _, err := c.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.SetDefaults(ctx, mps.Limits{MemoryLimit: caps[uuid], ThreadPercentage: 50}); err != nil {
			t.Fatal(err)
		}
	}
	srv, _ := r.AddClient(env.PipeDir, 4242)
	got, err := r.EnforcedLimitsOn(env.PipeDir, srv, gpuA)
	if err != nil {
		t.Fatal(err)
	}
	if got.MemoryLimit != caps[gpuB] {
		t.Fatalf("A enforces %d MiB; the simulation should put B's cap (%d) there, as CUDA's order does", got.MemoryLimit, caps[gpuB])
	}
}

// A single-layout daemon that serves another set of GPUs (a GPU added, or
// one started by Cloudpods' own daemon with no list) is restarted with the
// configured list only while no server runs: restarting kills clients.
func TestSingleLayoutDaemonRestartsForNewGPUsOnlyWhenIdle(t *testing.T) {
	r, env := mixedHost(t)
	ctx := context.Background()
	old := env // Cloudpods' way: no device list
	if err := r.Start(ctx, old); err != nil {
		t.Fatal(err)
	}
	srv, _ := r.AddClient(env.PipeDir, 4242)
	env.VisibleDevices, env.Single = mps.VisibleList([]string{gpuA, gpuB}), true
	c := mps.NewController(r, env, 5*time.Second, nil)
	adopted, err := c.Ensure(ctx)
	if err != nil || !adopted {
		t.Fatalf("busy daemon of unknown devices: adopted %v err %v, want adopted as it is", adopted, err)
	}
	if _, known := mps.RecordedDevices(env.PipeDir); known {
		t.Fatal("a daemon we did not start got a device record")
	}
	if err := r.RemoveClient(env.PipeDir, 4242); err != nil {
		t.Fatal(err)
	}
	if err := c.ShutdownServer(ctx, srv); err != nil {
		t.Fatal(err)
	}
	adopted, err = c.Ensure(ctx)
	if err != nil || adopted {
		t.Fatalf("idle daemon of unknown devices: adopted %v err %v, want restarted", adopted, err)
	}
	if got, _ := mps.RecordedDevices(env.PipeDir); got != env.VisibleDevices {
		t.Fatalf("recorded devices %q, want %q", got, env.VisibleDevices)
	}
	// Same list again: adopted.
	if adopted, err := c.Ensure(ctx); err != nil || !adopted {
		t.Fatalf("own daemon: adopted %v err %v", adopted, err)
	}
}
