package mps_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
)

// runContract is what the agent relies on from a control, run the same way
// against the simulator (CI) and the real nvidia-cuda-mps-control (a GPU
// host): passing on both is what makes the simulator a fair stand-in.
func runContract(t *testing.T, r mps.Runner, env mps.Env) {
	ctx := t.Context()
	c := mps.NewController(r, env, 10*time.Second, slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() {
		// Never leave a daemon behind, even when an assertion failed.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := c.Quit(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})

	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow() // later steps build on this one
		}
	}
	step("no daemon", func(t *testing.T) {
		if _, err := c.Command(ctx, "get_server_list"); !errors.Is(err, mps.ErrNoDaemon) {
			t.Fatalf("get_server_list = %v, want ErrNoDaemon", err)
		}
		if up, err := c.Running(ctx); err != nil || up {
			t.Fatalf("Running = %v, %v; want false, nil", up, err)
		}
	})
	step("start", func(t *testing.T) {
		adopted, err := c.Ensure(ctx)
		if err != nil || adopted {
			t.Fatalf("Ensure = %v, %v; want a started daemon", adopted, err)
		}
		if up, err := c.Running(ctx); err != nil || !up {
			t.Fatalf("Running = %v, %v after Ensure", up, err)
		}
	})
	step("adopt", func(t *testing.T) {
		adopted, err := c.Ensure(ctx)
		if err != nil || !adopted {
			t.Fatalf("second Ensure = %v, %v; want the running daemon adopted", adopted, err)
		}
	})
	step("initial defaults", func(t *testing.T) {
		got, err := c.Defaults(ctx)
		if err != nil || got != (mps.Limits{ThreadPercentage: 100}) {
			t.Fatalf("Defaults = %+v, %v; want 100%% and no memory limit", got, err)
		}
	})
	step("set defaults", func(t *testing.T) {
		if err := c.SetDefaults(ctx, mps.Limits{MemoryLimit: 35942, ThreadPercentage: 25}); err != nil {
			t.Fatal(err)
		}
		got, err := c.Defaults(ctx)
		if err != nil || got != (mps.Limits{MemoryLimit: 35 * 1024, ThreadPercentage: 25}) {
			t.Fatalf("Defaults = %+v, %v; want 35G read back (display rounds down) and 25.0", got, err)
		}
		if out, err := c.Command(ctx, "get_default_device_pinned_mem_limit 0"); err != nil || out != "35G\n" {
			t.Fatalf("get_default_device_pinned_mem_limit 0 = %q, %v; want 35G", out, err)
		}
		if out, err := c.Command(ctx, "get_default_active_thread_percentage"); err != nil || out != "25.0\n" {
			t.Fatalf("get_default_active_thread_percentage = %q, %v; want 25.0", out, err)
		}
	})
	step("out-of-range percentage refused", func(t *testing.T) {
		err := c.SetDefaults(ctx, mps.Limits{MemoryLimit: 35942, ThreadPercentage: 150})
		if err == nil || !strings.Contains(err.Error(), "150") {
			t.Fatalf("SetDefaults(150%%) = %v, want an error naming 150", err)
		}
		got, err := c.Defaults(ctx)
		if err != nil || got.ThreadPercentage != 25 {
			t.Fatalf("Defaults = %+v, %v; want 25 left in place", got, err)
		}
	})
	step("client priority", func(t *testing.T) {
		// docs/gpu-runs/qos-probe.md: 0 by default, 1 set silently, 2 refused.
		if got, err := c.Defaults(ctx); err != nil || got.ClientPriority != 0 {
			t.Fatalf("Defaults = %+v, %v; want client priority 0 before any is set", got, err)
		}
		if err := c.SetDefaults(ctx, mps.Limits{MemoryLimit: 35942, ThreadPercentage: 25, ClientPriority: 1}); err != nil {
			t.Fatal(err)
		}
		if out, err := c.Command(ctx, "get_default_client_priority"); err != nil || strings.TrimSpace(out) != "1" {
			t.Fatalf("get_default_client_priority = %q, %v; want 1", out, err)
		}
		if _, err := c.Command(ctx, "set_default_client_priority 2"); !errors.Is(err, mps.ErrInvalidPriority) {
			t.Fatalf("set_default_client_priority 2 = %v, want ErrInvalidPriority", err)
		}
		if got, err := c.Defaults(ctx); err != nil || got != (mps.Limits{MemoryLimit: 35 * 1024, ThreadPercentage: 25, ClientPriority: 1}) {
			t.Fatalf("Defaults = %+v, %v; want priority 1 left in place", got, err)
		}
		if err := c.SetDefaults(ctx, mps.Limits{MemoryLimit: 35942, ThreadPercentage: 25}); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Defaults(ctx); err != nil || got.ClientPriority != 0 {
			t.Fatalf("Defaults = %+v, %v; want priority 0 again", got, err)
		}
	})
	step("unknown command", func(t *testing.T) {
		if _, err := c.Command(ctx, "nosuchcommand"); !errors.Is(err, mps.ErrUnknownCommand) {
			t.Fatalf("nosuchcommand = %v, want ErrUnknownCommand", err)
		}
	})
	step("server pid required", func(t *testing.T) {
		if _, err := c.Command(ctx, "get_server_status"); !errors.Is(err, mps.ErrPIDRequired) {
			t.Fatalf("get_server_status = %v, want ErrPIDRequired", err)
		}
	})
	step("no servers before clients", func(t *testing.T) {
		if got, err := c.Servers(ctx); err != nil || len(got) != 0 {
			t.Fatalf("Servers = %v, %v; want none (servers start lazily)", got, err)
		}
	})
	step("quit", func(t *testing.T) {
		if err := c.Quit(ctx); err != nil {
			t.Fatal(err)
		}
		if up, err := c.Running(ctx); err != nil || up {
			t.Fatalf("Running after Quit = %v, %v", up, err)
		}
	})
}

func TestContractSim(t *testing.T) {
	dir := t.TempDir()
	runContract(t, mpssim.New(nil), mps.Env{
		PipeDir:        filepath.Join(dir, "p"),
		LogDir:         filepath.Join(dir, "l"),
		VisibleDevices: "GPU-0757c6d5-b93a-6cd1-29ca-e10c633c5de6",
	})
}

// TestContractReal runs the contract on the real control. On a GPU host:
//
//	MPS_CONTRACT_REAL=1 MPS_CONTROL_BINARY=nvidia-cuda-mps-control \
//	MPS_CONTRACT_GPU=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1) \
//	./mps.test -test.run TestContractReal -test.v
func TestContractReal(t *testing.T) {
	if os.Getenv("MPS_CONTRACT_REAL") != "1" {
		t.Skip("needs a GPU and nvidia-cuda-mps-control: set MPS_CONTRACT_REAL=1, MPS_CONTROL_BINARY and MPS_CONTRACT_GPU (a GPU UUID)")
	}
	bin := os.Getenv("MPS_CONTROL_BINARY")
	if bin == "" {
		bin = "nvidia-cuda-mps-control"
	}
	gpu := os.Getenv("MPS_CONTRACT_GPU")
	if gpu == "" {
		t.Fatal("MPS_CONTRACT_GPU must name the GPU (UUID) the daemon may use")
	}
	// Short and under /tmp: the socket path must fit 107 bytes, and
	// t.TempDir() may sit under a long TMPDIR.
	dir, err := os.MkdirTemp("/tmp", "mpsc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	runContract(t, mps.NewExecRunner(bin), mps.Env{
		PipeDir:        filepath.Join(dir, "p"),
		LogDir:         filepath.Join(dir, "l"),
		VisibleDevices: gpu,
	})
}

// testWriter sends log lines to t.Log, so -v shows what the control answered.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
