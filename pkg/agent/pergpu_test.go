package agent

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/gpu/nvmlsim"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
)

// countingRunner is the simulated control, counting the commands each
// control daemon (by pipe directory) is sent.
type countingRunner struct {
	*mpssim.Runner
	mu    sync.Mutex
	calls map[string]int
}

func (r *countingRunner) count(env mps.Env) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[filepath.Base(env.PipeDir)]++
}

func (r *countingRunner) Run(ctx context.Context, env mps.Env, command string) (mps.Output, error) {
	r.count(env)
	return r.Runner.Run(ctx, env, command)
}

func (r *countingRunner) Start(ctx context.Context, env mps.Env) error {
	r.count(env)
	return r.Runner.Start(ctx, env)
}

// take returns the counts since the last take.
func (r *countingRunner) take() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = map[string]int{}
	return c
}

// eightGPUs is a device YAML for the simulated 8-GPU host: GPU i split in
// n[i].
func eightGPUs(n [8]int) string {
	var b strings.Builder
	b.WriteString("devices:\n")
	for i, v := range n {
		fmt.Fprintf(&b, "- path: /dev/nvidia%d\n  type: NVIDIA_MPS\n  virtual_number: %d\n", i, v)
	}
	return b.String()
}

// onSimulatedHost puts h's agent on a simulated host of this profile
// (pkg/gpu/nvmlsim, the --simulate host) and counts its MPS commands.
func (h *harness) onSimulatedHost(t testing.TB, profile string) (*nvmlsim.Host, *countingRunner) {
	t.Helper()
	backend, sim, err := nvmlsim.New(profile, filepath.Join(h.dir, "sim"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { backend.Close() })
	r := &countingRunner{Runner: h.runner, calls: map[string]int{}}
	h.agent.opts.Backend, h.agent.opts.Runner = backend, r
	h.agent.opts.SysfsRoot, h.agent.opts.DevRoot = sim.SysfsRoot(), sim.DevRoot()
	return sim, r
}

// An edit of one GPU's entry on the simulated 8-GPU host reaches that
// GPU's MPS control daemon and its inventory rows, and nothing of the seven
// others: a reconcile after an edit asks MPS only about what changed, and
// the CDI spec is written once.
func TestEditOfOneGPUTouchesThatGPUOnly(t *testing.T) {
	h := newHarness(t, "", eightGPUs([8]int{4, 4, 4, 4, 4, 4, 4, 4}))
	sim, runner := h.onSimulatedHost(t, "8xH100")
	var logs syncBuffer
	h.logTo(t, &logs)
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := runner.take(); len(got) != 8 {
		t.Fatalf("the first reconcile reached %d control daemons, want all 8: %v", len(got), got)
	}
	type row struct {
		id      string
		version int
	}
	rows := func() map[string]row {
		m := map[string]row{}
		for _, d := range h.devices() {
			m[d.Addr] = row{d.ID, d.UpdateVersion}
		}
		return m
	}
	before := rows()
	if len(before) != 32 {
		t.Fatalf("%d rows, want 8 x 4", len(before))
	}
	logs.Reset()

	edited := sim.GPUs()[3]
	h.cfg.Devices = mustDevices(t, h.dir, eightGPUs([8]int{4, 4, 4, 2, 4, 4, 4, 4}))
	if err := h.agent.reconcileChanged(ctx); err != nil {
		t.Fatal(err)
	}
	if got := runner.take(); !maps.Equal(got, map[string]int{edited.UUID.String(): got[edited.UUID.String()]}) || got[edited.UUID.String()] == 0 {
		t.Errorf("MPS commands by control daemon: %v; want GPU 3's (%s) alone", got, edited.UUID.String())
	}
	after := rows()
	for addr, r := range before {
		onEdited := strings.HasPrefix(addr, edited.PCI.Short())
		if !onEdited && after[addr] != r {
			t.Errorf("row %s of an unedited GPU changed: %+v -> %+v", addr, r, after[addr])
		}
		if _, kept := after[addr]; onEdited && kept != slices.Contains([]string{"-0", "-1"}, addr[len(addr)-2:]) {
			t.Errorf("row %s of the edited GPU: kept %v", addr, kept)
		}
	}
	if len(after) != 30 {
		t.Errorf("%d rows after the edit, want 30", len(after))
	}
	if n := strings.Count(logs.String(), "CDI spec written"); n != 1 {
		t.Errorf("the CDI spec was written %d times, want once:\n%s", n, logs.String())
	}
	if d, err := h.controlDefaultsOf(edited.UUID.String()); err != nil || d.MemoryLimit != edited.MemoryTotal.MiB()/2 {
		t.Errorf("GPU 3's control daemon holds %+v (%v), want half the GPU's memory", d, err)
	}

	// Nothing changed: nothing asked, nothing written.
	logs.Reset()
	if err := h.agent.reconcileChanged(ctx); err != nil {
		t.Fatal(err)
	}
	if got := runner.take(); len(got) != 0 {
		t.Errorf("a reconcile with nothing changed sent MPS commands: %v", got)
	}
	if strings.Contains(logs.String(), "CDI spec written") {
		t.Errorf("a reconcile with nothing changed wrote the CDI spec:\n%s", logs.String())
	}
}

// controlDefaultsOf reads the defaults of the control daemon of GPU uuid.
func (h *harness) controlDefaultsOf(uuid string) (mps.Limits, error) {
	c := mps.NewController(h.runner, mps.Env{PipeDir: filepath.Join(h.dir, "pipe", uuid), VisibleDevices: uuid}, 5*time.Second, nil)
	return c.Defaults(context.Background())
}

// In the single layout the GPUs share one control daemon: a health probe
// asks it once, not once per GPU.
func TestSingleLayoutProbesItsDaemonOnce(t *testing.T) {
	h := newHarness(t, "mps_pipe_layout: single\n", eightGPUs([8]int{4, 4, 4, 4, 4, 4, 4, 4}))
	_, runner := h.onSimulatedHost(t, "8xH100")
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	runner.take()
	if h.agent.mps.probe(ctx) {
		t.Error("a probe of healthy GPUs reported a change")
	}
	perGPU := newHarness(t, "", eightGPUs([8]int{4, 4, 4, 4, 4, 4, 4, 4}))
	_, perGPURunner := perGPU.onSimulatedHost(t, "8xH100")
	if err := perGPU.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	perGPURunner.take()
	perGPU.agent.mps.probe(ctx)
	single, each := runner.take(), perGPURunner.take()
	if len(single) != 1 || len(each) != 8 {
		t.Fatalf("daemons asked: single layout %v, per-GPU layout %v", single, each)
	}
	for _, n := range single {
		if n != each[firstKey(each)] {
			t.Errorf("the single daemon was sent %d commands in one probe, a per-GPU daemon %d: want the same", n, each[firstKey(each)])
		}
	}
}

func firstKey(m map[string]int) string {
	for k := range m {
		return k
	}
	return ""
}
