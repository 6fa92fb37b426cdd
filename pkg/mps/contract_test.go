package mps_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
	"yunion.io/x/mps-daemon/pkg/units"
)

// runContract is what the agent relies on from a control, run the same way
// against the simulator (CI) and the real nvidia-cuda-mps-control (a GPU
// host): passing on both is what makes the simulator a fair stand-in.
//
// The controller goes through a Guard, as the daemon's do: env carries a
// private directory, the control daemon's privileged socket is moved there
// as it starts, and the commands sent through the pipe directory (as a pod
// holding the pipe root sends them) are refused or answered as the real
// control did (docs/gpu-runs/probe-privileged-2026-11-29.txt).
func runContract(t *testing.T, r mps.Runner, env mps.Env) {
	ctx := t.Context()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g := mps.NewGuard(log)
	c := mps.NewController(g.Runner(r), env, 10*time.Second, log)
	// pod runs a command as a process given the pipe directory only.
	pod := func(t *testing.T, command string) (string, error) {
		t.Helper()
		out, err := r.Run(ctx, mps.Env{PipeDir: env.PipeDir}, command)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(out.Stdout), nil
	}
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
	step("privileged socket out of the pipe directory", func(t *testing.T) {
		checkMoved(t, env)
		if st := g.Privileged(env); !st.Moved || st.Reachable {
			t.Fatalf("Privileged = %+v", st)
		}
		t.Logf("the socket was in the pipe directory at most %s after the start", g.Privileged(env).Window)
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
	step("privileged commands refused through the pipe directory", func(t *testing.T) {
		if out, err := pod(t, "quit"); err != nil || out != mps.MsgQuitRefused {
			t.Fatalf("quit through the pipe directory = %q, %v; want %q", out, err, mps.MsgQuitRefused)
		}
		for _, cmd := range []string{"set_default_active_thread_percentage 37", "set_default_device_pinned_mem_limit 0 3G"} {
			if out, err := pod(t, cmd); err != nil || !strings.HasPrefix(out, "Insufficient privileges for UID ") {
				t.Fatalf("%s through the pipe directory = %q, %v; want the refusal", cmd, out, err)
			}
		}
		if up, err := c.Running(ctx); err != nil || !up {
			t.Fatalf("Running after the refused quit = %v, %v", up, err)
		}
		if got, err := c.Defaults(ctx); err != nil || got != (mps.Limits{MemoryLimit: 35 * 1024, ThreadPercentage: 25}) {
			t.Fatalf("Defaults = %+v, %v; want the daemon's own left in place", got, err)
		}
		if out, err := pod(t, "get_default_active_thread_percentage"); err != nil || out != "25.0" {
			t.Fatalf("a question through the pipe directory = %q, %v", out, err)
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
	// Another program starts a control daemon where the placeholder and
	// the dead moved socket are (a daemon started by hand, or after kill
	// -9): it starts, and its new socket is moved at the next command.
	step("started again beside the placeholder", func(t *testing.T) {
		if err := r.Start(ctx, mps.Env{PipeDir: env.PipeDir, LogDir: env.LogDir, VisibleDevices: env.VisibleDevices, MultiUser: env.MultiUser}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := pod(t, "get_server_list"); err == nil {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("the control daemon started beside the placeholder never answered: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if adopted, err := c.Ensure(ctx); err != nil || !adopted {
			t.Fatalf("Ensure = %v, %v; want it adopted", adopted, err)
		}
		checkMoved(t, env)
		if out, err := pod(t, "quit"); err != nil || out != mps.MsgQuitRefused {
			t.Fatalf("quit through the pipe directory = %q, %v; want %q", out, err, mps.MsgQuitRefused)
		}
		if err := c.SetDefaults(ctx, mps.Limits{MemoryLimit: 4096, ThreadPercentage: 50}); err != nil {
			t.Fatal(err)
		}
		if err := c.Quit(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestContractSim(t *testing.T) {
	dir := t.TempDir()
	runContract(t, mpssim.New(nil), mps.Env{
		PipeDir:        filepath.Join(dir, "p"),
		LogDir:         filepath.Join(dir, "l"),
		VisibleDevices: "GPU-0757c6d5-b93a-6cd1-29ca-e10c633c5de6",
		PrivilegedDir:  mps.PrivilegedRoot(filepath.Join(dir, "p")),
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
	gpu := os.Getenv("MPS_CONTRACT_GPU")
	if gpu == "" {
		t.Fatal("MPS_CONTRACT_GPU must name the GPU (UUID) the daemon may use")
	}
	dir := realDir(t)
	runContract(t, mps.NewExecRunner(controlBinary()), mps.Env{
		PipeDir:        filepath.Join(dir, "p"),
		LogDir:         filepath.Join(dir, "l"),
		VisibleDevices: gpu,
		PrivilegedDir:  mps.PrivilegedRoot(filepath.Join(dir, "p")),
	})
}

// clientSaw is what a client connecting with some environment got: the
// GPUs it sees (nil when CUDA refused it) and the memory it could take on
// its ordinal 0, in MiB (a real client allocates until refused; the
// simulator answers the limit it holds, or noLimit).
type clientSaw struct {
	Devices []string
	Usable  units.MiB
	Refused string
	// PID is the client process that allocated; Began and Ended bound
	// its run.
	PID          int
	Began, Ended time.Time
}

// noLimit is what the simulator's client reports without a memory limit:
// more than any case's limit.
const noLimit = units.MiB(1 << 20)

// runClientContract is what a CUDA client gets from a control daemon
// serving gpu alone (the per-GPU layout) with a 4 GiB default limit,
// connecting with only the environment each case gives it; other is
// another GPU of the host ("" on a host of one). It is what the CDI spec
// and the accounting rely on (docs/containers.md, "Several GPUs"):
// CUDA_VISIBLE_DEVICES picks among the server's GPUs, and a client's own
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT lowers the limit or, naming what it
// does not see, lifts it (docs/gpu-runs/mps-probe-limits.txt).
//
// The control daemon's privileged socket is out of the pipe directory
// (a Guard, as in the daemon): clients connecting there are served.
func runClientContract(t *testing.T, r mps.Runner, env mps.Env, gpu, other string, connect func(t *testing.T, environ []string) clientSaw) {
	ctx := t.Context()
	env.PrivilegedDir = mps.PrivilegedRoot(env.PipeDir)
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	c := mps.NewController(mps.NewGuard(log).Runner(r), env, 10*time.Second, log)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := c.Quit(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if _, err := c.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	const limit = 4096
	if err := c.SetDefaults(ctx, mps.Limits{MemoryLimit: limit, ThreadPercentage: 100}); err != nil {
		t.Fatal(err)
	}
	checkMoved(t, env)
	const none = -1
	for _, k := range []struct {
		name   string
		env    []string
		needs2 bool
		sees   bool // false: refused
		limit  units.MiB
	}{
		{"no CUDA_VISIBLE_DEVICES", nil, false, true, limit},
		{"its GPU's UUID", []string{"CUDA_VISIBLE_DEVICES=" + gpu}, false, true, limit},
		{"ordinal 0", []string{"CUDA_VISIBLE_DEVICES=0"}, false, true, limit},
		{"ordinal 1", []string{"CUDA_VISIBLE_DEVICES=1"}, false, false, 0},
		{"empty CUDA_VISIBLE_DEVICES", []string{"CUDA_VISIBLE_DEVICES="}, false, false, 0},
		{"another GPU of the host", []string{"CUDA_VISIBLE_DEVICES=" + other}, true, false, 0},
		{"its GPU, then another", []string{"CUDA_VISIBLE_DEVICES=" + gpu + "," + other}, true, true, limit},
		{"another GPU, then its", []string{"CUDA_VISIBLE_DEVICES=" + other + "," + gpu}, true, false, 0},
		{"its own lower limit", []string{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M"}, false, true, 2048},
		{"its own lower limit by UUID", []string{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=" + gpu + "=2048M"}, false, true, 2048},
		{"its own higher limit", []string{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=16G"}, false, true, limit},
		{"an empty limit", []string{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="}, false, true, limit},
		{"a limit of an ordinal it does not see", []string{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=1=2048M"}, false, true, none},
		{"a limit of garbage", []string{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=x"}, false, true, none},
		{"a limit of 0", []string{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=0"}, false, true, none},
	} {
		t.Run(k.name, func(t *testing.T) {
			if k.needs2 && other == "" {
				t.Skip("needs a second GPU")
			}
			got := connect(t, append([]string{"CUDA_MPS_PIPE_DIRECTORY=" + env.PipeDir}, k.env...))
			if k.sees {
				checkNewClientLine(t, env, got)
				checkActiveLine(t, env, got)
			}
			switch {
			case !k.sees:
				if got.Devices != nil {
					t.Fatalf("client saw %v, want it refused (CUDA_ERROR_NO_DEVICE)", got.Devices)
				}
			case !slices.EqualFunc(got.Devices, []string{gpu}, strings.EqualFold):
				t.Fatalf("client saw %v (refused: %q), want only %s", got.Devices, got.Refused, gpu)
			case k.limit == none:
				if got.Usable <= 4*limit {
					t.Fatalf("client took %d MiB; want no limit at all (more than %d)", got.Usable, 4*limit)
				}
			case got.Usable > k.limit || got.Usable <= k.limit-1024:
				t.Fatalf("client took %d MiB; want its limit, %d MiB (less a context's overhead)", got.Usable, k.limit)
			}
		})
	}
}

// checkNewClientLine: the control daemon logged the client's connection
// in control.log as a NEW CLIENT line of its PID, at a time within its run
// (mps.ParseNewClient; docs/gpu-runs/mps-probe-escape.txt): what the
// accounting learns of new clients from.
func checkNewClientLine(t *testing.T, env mps.Env, got clientSaw) {
	t.Helper()
	checkLogLine(t, mps.ControlLog(env), "NEW CLIENT", mps.ErrNotNewClient, got, func(l []byte) (int, time.Time, error) {
		nc, err := mps.ParseNewClient(l, nil)
		return nc.PID, nc.At, err
	})
}

// checkActiveLine: the client's server logged its context up in
// server.log, an ACTIVE line of its PID at a time within its run
// (mps.ParseActiveClient; docs/gpu-runs/probe-wedge-2026-11-29.txt): the
// moment from which the accounting may kill it without wedging the
// server.
func checkActiveLine(t *testing.T, env mps.Env, got clientSaw) {
	t.Helper()
	checkLogLine(t, mps.ServerLog(env), "ACTIVE", mps.ErrNotActiveClient, got, func(l []byte) (int, time.Time, error) {
		ac, err := mps.ParseActiveClient(l, nil)
		return ac.PID, ac.At, err
	})
}

// checkLogLine: the log at path has a line of the client's PID (what, as
// parse reads it), the first at a time within its run, and every line is
// one parse reads or one it calls notLine.
func checkLogLine(t *testing.T, path, what string, notLine error, got clientSaw, parse func([]byte) (pid int, at time.Time, err error)) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v", filepath.Base(path), err)
	}
	var first *time.Time
	for _, l := range strings.Split(string(raw), "\n") {
		pid, at, err := parse([]byte(l))
		switch {
		case err == nil && pid == got.PID && first == nil:
			first = &at
		case err != nil && !errors.Is(err, notLine):
			t.Errorf("%s line %q: %v", filepath.Base(path), l, err)
		}
	}
	if first == nil {
		t.Fatalf("no %s line of client PID %d in %s", what, got.PID, path)
	}
	// The log's times have a millisecond; the clocks are the same host's.
	if at := *first; at.Before(got.Began.Add(-time.Second)) || at.After(got.Ended.Add(time.Second)) {
		t.Errorf("client %d's %s line at %s, outside its run %s .. %s", got.PID, what, at, got.Began, got.Ended)
	}
}

func TestClientContractSim(t *testing.T) {
	dir := t.TempDir()
	const gpu, other = "GPU-27771d49-33aa-a84b-baff-7e69ee768833", "GPU-6f63702a-74e5-3c6a-73cf-fa81fee82a9f"
	sim := mpssim.New(nil)
	pid := 7000
	runClientContract(t, sim, mps.Env{PipeDir: filepath.Join(dir, "p"), LogDir: filepath.Join(dir, "l"), VisibleDevices: gpu}, gpu, other,
		func(t *testing.T, environ []string) clientSaw {
			pid++
			began := time.Now()
			v, err := sim.Connect(pid, environ)
			if errors.Is(err, mpssim.ErrNoDevice) {
				return clientSaw{Refused: err.Error()}
			}
			if err != nil {
				t.Fatal(err)
			}
			usable := v.MemoryLimits[0]
			if usable == 0 {
				usable = noLimit
			}
			return clientSaw{Devices: v.Devices, Usable: usable, PID: pid, Began: began, Ended: time.Now()}
		})
}

// TestClientContractReal runs the client contract on a GPU host, with a
// driver-API client (tests/gpu/clients/cuda_client.py):
//
//	MPS_CONTRACT_REAL=1 MPS_CONTRACT_GPU=<uuid> MPS_CONTRACT_OTHER_GPU=<uuid> \
//	MPS_CONTRACT_CLIENT="python3 tests/gpu/clients/cuda_client.py" \
//	./mps.test -test.run TestClientContractReal -test.v
func TestClientContractReal(t *testing.T) {
	if os.Getenv("MPS_CONTRACT_REAL") != "1" {
		t.Skip("needs a GPU, nvidia-cuda-mps-control and a CUDA client: MPS_CONTRACT_REAL=1, MPS_CONTRACT_GPU, MPS_CONTRACT_CLIENT")
	}
	gpu, client := os.Getenv("MPS_CONTRACT_GPU"), strings.Fields(os.Getenv("MPS_CONTRACT_CLIENT"))
	if gpu == "" || len(client) == 0 {
		t.Fatal("MPS_CONTRACT_GPU (a GPU UUID) and MPS_CONTRACT_CLIENT (the client's command) must be set")
	}
	dir := realDir(t)
	base := slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "CUDA_") })
	var last clientSaw // the last run's process
	run := func(t *testing.T, environ []string, args ...string) string {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, client[0], append(slices.Clone(client[1:]), args...)...)
		cmd.Env = append(slices.Clone(base), environ...)
		last.Began = time.Now()
		out, err := cmd.Output()
		last.Ended = time.Now()
		if cmd.Process != nil {
			last.PID = cmd.Process.Pid
		}
		t.Logf("%v %v: %s (%v)", environ, args, strings.TrimSpace(string(out)), err)
		return strings.TrimSpace(string(out))
	}
	runClientContract(t, mps.NewExecRunner(controlBinary()), mps.Env{PipeDir: filepath.Join(dir, "p"), LogDir: filepath.Join(dir, "l"), VisibleDevices: gpu, MultiUser: true},
		gpu, os.Getenv("MPS_CONTRACT_OTHER_GPU"),
		func(t *testing.T, environ []string) clientSaw {
			f := strings.Fields(run(t, environ, "init"))
			if len(f) < 2 || f[0] != "ok" {
				return clientSaw{Refused: strings.Join(f, " ")}
			}
			a := strings.Fields(run(t, environ, "alloc"))
			n, err := strconv.Atoi(a[0])
			if len(a) != 2 || err != nil {
				t.Fatalf("client's alloc printed %q", a)
			}
			return clientSaw{Devices: f[2:], Usable: units.MiB(n), PID: last.PID, Began: last.Began, Ended: last.Ended}
		})
}

// realDir is a directory for a real control daemon's pipe and log: short,
// under /tmp (the socket path must fit 107 bytes, and t.TempDir() may sit
// under a long TMPDIR), traversable by every client.
func realDir(t *testing.T) string {
	dir, err := os.MkdirTemp("/tmp", "mpsc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// controlBinary is MPS_CONTROL_BINARY, or the control on PATH.
func controlBinary() string {
	if bin := os.Getenv("MPS_CONTROL_BINARY"); bin != "" {
		return bin
	}
	return "nvidia-cuda-mps-control"
}

// testWriter sends log lines to t.Log, so -v shows what the control answered.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
