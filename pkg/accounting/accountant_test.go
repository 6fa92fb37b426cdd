package accounting

import (
	"bytes"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
)

// TestAccountantEnforcesWithSimulatedMPS is the GPU suite's scenario on the
// simulated MPS control: two processes on one virtual device, together past
// its cap, end with one terminated and the other running; a process on
// another virtual device of the same GPU runs on undisturbed.
func TestAccountantEnforcesWithSimulatedMPS(t *testing.T) {
	dir := t.TempDir()
	env := mps.Env{PipeDir: filepath.Join(dir, "p"), LogDir: filepath.Join(dir, "l"), VisibleDevices: gpuA}
	sim := mpssim.New(nil)
	ctl := mps.NewController(sim, env, 5*time.Second, nil)
	if _, err := ctl.Ensure(t.Context()); err != nil {
		t.Fatal(err)
	}
	proc := newFakeProc(t)
	killer := &fakeKiller{proc: proc, ignoreTERM: map[int]bool{}}
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	var logs bytes.Buffer
	acct := New(Options{ProcRoot: proc.root, Grace: grace, Killer: killer, Now: clock.now,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	a0, a1 := gpuA+"::0", gpuA+"::1"
	caps := map[string]uint64{a0: 8 * gib, a1: 8 * gib}
	terms := map[gpu.UUID]Terminator{gpuA: ctl}

	// NVML's view; the test keeps it in step with the processes, as the
	// driver does.
	nvml := map[int]uint64{}
	start := func(pid int, ticks uint64, device string, used uint64) {
		t.Helper()
		proc.add(pid, ticks, device)
		if _, err := sim.AddClient(env.PipeDir, pid); err != nil {
			t.Fatal(err)
		}
		nvml[pid] = used
	}
	sample := func() map[gpu.UUID][]gpu.Process {
		var ps []gpu.Process
		for _, pid := range slices.Sorted(maps.Keys(nvml)) {
			ps = append(ps, gpu.Process{PID: pid, UsedMemoryBytes: nvml[pid]})
		}
		return map[gpu.UUID][]gpu.Process{gpuA: ps}
	}
	mpsClients := func() []int {
		t.Helper()
		m, err := ctl.ClientServers(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return slices.Sorted(maps.Keys(m))
	}

	start(10, 100, a0, 5*gib)
	start(20, 150, a1, 6*gib)
	r := acct.Tick(t.Context(), config.AccountingEnforce, sample(), caps, nil, terms)
	if len(r.Decision.Over) != 0 || len(r.Steps) != 0 || r.Usage.PerDevice[a0].UsedBytes != 5*gib {
		t.Fatalf("under the caps: %+v", r)
	}

	// The second process of device 0 takes it past its cap.
	start(11, 200, a0, 4*gib)
	clock.advance(time.Second)
	r = acct.Tick(t.Context(), config.AccountingReport, sample(), caps, nil, terms)
	if len(r.Decision.Over) != 1 || r.Decision.Over[0].Device != a0 || len(r.Steps) != 0 {
		t.Fatalf("report: over = %+v, steps = %v; want %s reported and nothing done", r.Decision.Over, stepNames(r.Steps), a0)
	}
	if got := mpsClients(); !slices.Equal(got, []int{10, 11, 20}) {
		t.Fatalf("report touched MPS clients: %v", got)
	}
	r = acct.Tick(t.Context(), config.AccountingEnforce, sample(), caps, nil, terms)
	if got := stepNames(r.Steps); !slices.Equal(got, []string{"11:terminate_client"}) {
		t.Fatalf("enforce: steps = %v, want 11:terminate_client", got)
	}
	if got := mpsClients(); !slices.Equal(got, []int{10, 20}) {
		t.Fatalf("MPS clients after terminate_client = %v, want 10 and 20", got)
	}
	// Its context is gone, the process (sleeping outside CUDA) is not, as
	// measured on an H200.
	delete(nvml, 11)
	clock.advance(time.Second)
	r = acct.Tick(t.Context(), config.AccountingEnforce, sample(), caps, nil, terms)
	if len(r.Steps) != 0 || len(r.Decision.Over) != 0 {
		t.Fatalf("within the grace period: steps %v, over %+v", stepNames(r.Steps), r.Decision.Over)
	}
	clock.advance(grace)
	r = acct.Tick(t.Context(), config.AccountingEnforce, sample(), caps, nil, terms)
	if got := stepNames(r.Steps); !slices.Equal(got, []string{"11:sigterm"}) {
		t.Fatalf("after the grace period: steps = %v, want 11:sigterm", got)
	}
	clock.advance(grace)
	r = acct.Tick(t.Context(), config.AccountingEnforce, sample(), caps, nil, terms)
	if got := stepNames(r.Steps); !slices.Equal(got, []string{"11:gone"}) {
		t.Fatalf("steps = %v, want 11:gone", got)
	}
	if !slices.Equal(killer.sent, []string{"11:TERM"}) {
		t.Errorf("signals = %v, want 11:TERM only", killer.sent)
	}
	if got := r.Usage.PerDevice[a0]; got.UsedBytes != 5*gib || !slices.Equal(got.PIDs, []int{10}) {
		t.Errorf("device 0 now %+v, want PID 10 alone at 5 GiB", got)
	}
	if got := r.Usage.PerDevice[a1]; got.UsedBytes != 6*gib || !slices.Equal(got.PIDs, []int{20}) {
		t.Errorf("device 1 now %+v, want PID 20 undisturbed at 6 GiB", got)
	}
	for _, want := range []string{"virtual device over its memory cap", "step=terminate_client", "step=sigterm", "step=gone"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	if n := strings.Count(logs.String(), "virtual device over its memory cap"); n != 1 {
		t.Errorf("the device going over was logged %d times, want once", n)
	}
}

func TestAccountantReportsUnknownAndForgetsWhenOff(t *testing.T) {
	proc := newFakeProc(t)
	proc.add(30, 100, "")
	proc.add(31, 200, gpuA+"::0")
	proc.add(32, 300, gpuA+"::0")
	killer := &fakeKiller{proc: proc}
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	var logs bytes.Buffer
	acct := New(Options{ProcRoot: proc.root, Killer: killer, Now: clock.now, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	caps := map[string]uint64{gpuA + "::0": 8 * gib}
	procs := map[gpu.UUID][]gpu.Process{gpuA: {{PID: 30, UsedMemoryBytes: 100 * gib}, {PID: 31, UsedMemoryBytes: 5 * gib}}}
	term := &fakeTerminator{proc: proc, clients: map[int]int{30: 1, 31: 1, 32: 1}}
	terms := map[gpu.UUID]Terminator{gpuA: term}

	for range 2 {
		r := acct.Tick(t.Context(), config.AccountingEnforce, procs, caps, nil, terms)
		if len(r.Usage.Unknown) != 1 || r.Usage.Unknown[0].PID != 30 || len(r.Steps) != 0 {
			t.Fatalf("unknown = %+v, steps = %v; want PID 30 reported and nothing done", r.Usage.Unknown, stepNames(r.Steps))
		}
	}
	if n := strings.Count(logs.String(), "billed to no virtual device"); n != 1 {
		t.Errorf("the unknown process was logged %d times, want once", n)
	}

	// A termination under way is dropped when the policy goes off, and
	// enforce afterwards starts without history.
	procs[gpuA] = append(procs[gpuA], gpu.Process{PID: 32, UsedMemoryBytes: 4 * gib})
	r := acct.Tick(t.Context(), config.AccountingEnforce, procs, caps, nil, terms)
	if got := stepNames(r.Steps); !slices.Equal(got, []string{"32:terminate_client"}) {
		t.Fatalf("steps = %v, want 32:terminate_client", got)
	}
	if r := acct.Tick(t.Context(), config.AccountingOff, nil, caps, nil, terms); len(r.Usage.PerDevice) != 0 || len(r.Steps) != 0 {
		t.Fatalf("off: %+v", r)
	}
	clock.advance(time.Hour)
	r = acct.Tick(t.Context(), config.AccountingReport, procs, caps, nil, terms)
	if len(r.Steps) != 0 || len(killer.sent) != 0 {
		t.Errorf("after off then report: steps %v, signals %v; want none", stepNames(r.Steps), killer.sent)
	}
}
