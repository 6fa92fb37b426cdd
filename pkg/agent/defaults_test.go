package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/mps"
)

// setCommands counts the set_default_* commands GPU i's control daemon got.
func (h *harness) setCommands(t *testing.T, i int) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.dir, "log", twoGPUs()[i].UUID.String(), "control.log"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "Cmd:set_default_")
}

// drift sets GPU i's defaults by hand, as an operator could.
func (h *harness) drift(t *testing.T, i int, l mps.Limits) {
	t.Helper()
	// Root on the host sets defaults through the private directory, the
	// only one that holds the control daemon's privileged socket.
	private := filepath.Join(mps.PrivilegedRoot(filepath.Join(h.dir, "pipe")), twoGPUs()[i].UUID.String())
	c := mps.NewController(h.runner, mps.Env{PipeDir: private, VisibleDevices: twoGPUs()[i].UUID.String()}, 5*time.Second, nil)
	if err := c.SetDefaults(context.Background(), l); err != nil {
		t.Fatal(err)
	}
}

// TestIdleReconcilesReadDefaults: once set, the defaults are read, not set
// again, by the full reconciles that follow, until the tenth.
func TestIdleReconcilesReadDefaults(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	first := h.setCommands(t, 0)
	if first == 0 {
		t.Fatal("the first reconcile set no default")
	}
	for range setEvery - 1 {
		if err := h.agent.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := h.setCommands(t, 0) - first; n != 0 {
		t.Errorf("%d set_default_* commands in %d idle reconciles, want none", n, setEvery-1)
	}
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if n := h.setCommands(t, 0) - first; n != first {
		t.Errorf("reconcile %d sent %d set_default_* commands, want all %d again", setEvery, n, first)
	}
}

// reconciledDefaults is a harness of two GPUs after its first reconcile,
// with the exact defaults that reconcile gave GPU 0's control daemon.
func reconciledDefaults(t *testing.T) (*harness, mps.Limits) {
	t.Helper()
	h := newHarness(t, "", fourAndTwo)
	if err := h.agent.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	want, err := h.runner.ExactDefaults(h.pipeDir(0))
	if err != nil {
		t.Fatal(err)
	}
	return h, want
}

// TestDriftedDefaultsRepaired: a default changed by hand is set back, at
// the next full reconcile when the getters show the change, and within
// setEvery full reconciles when they cannot (a memory limit within the same
// GiB, which they print rounded).
func TestDriftedDefaultsRepaired(t *testing.T) {
	h, want := reconciledDefaults(t)
	ctx := context.Background()
	visible := []mps.Limits{
		{MemoryLimit: want.MemoryLimit + 2048, ThreadPercentage: want.ThreadPercentage, ClientPriority: want.ClientPriority},
		{MemoryLimit: want.MemoryLimit, ThreadPercentage: 100, ClientPriority: want.ClientPriority},
		{MemoryLimit: want.MemoryLimit, ThreadPercentage: want.ThreadPercentage, ClientPriority: 1 - want.ClientPriority},
		{ThreadPercentage: want.ThreadPercentage, ClientPriority: want.ClientPriority}, // no limit at all
	}
	for _, d := range visible {
		h.drift(t, 0, d)
		if err := h.agent.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		if got, err := h.runner.ExactDefaults(h.pipeDir(0)); err != nil || got != want {
			t.Fatalf("after drifting to %+v and one reconcile: %+v, %v; want %+v", d, got, err, want)
		}
	}

	hidden := want
	hidden.MemoryLimit = want.MemoryLimit / 1024 * 1024
	if hidden.MemoryLimit == want.MemoryLimit {
		hidden.MemoryLimit += 512
	}
	if mps.DisplayMemLimit(hidden.MemoryLimit) != mps.DisplayMemLimit(want.MemoryLimit) {
		t.Fatalf("test: %d and %d MiB print differently", hidden.MemoryLimit, want.MemoryLimit)
	}
	h.drift(t, 0, hidden)
	for i := 1; ; i++ {
		if err := h.agent.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := h.runner.ExactDefaults(h.pipeDir(0))
		if err != nil {
			t.Fatal(err)
		}
		if got == want {
			break
		}
		if i == setEvery {
			t.Fatalf("a memory limit drifted within its GiB is still %d MiB after %d full reconciles, want %d", got.MemoryLimit, i, want.MemoryLimit)
		}
	}
}

// TestRestartedDaemonSetsDefaults: a control daemon that restarted between
// two reconciles, unseen by the health probe, starts with the control's own
// defaults, which the getters show: the next full reconcile sets them.
func TestRestartedDaemonSetsDefaults(t *testing.T) {
	h, want := reconciledDefaults(t)
	ctx := context.Background()
	h.runner.Kill(h.pipeDir(0))
	env := mps.Env{PipeDir: h.pipeDir(0), LogDir: filepath.Join(h.dir, "log", twoGPUs()[0].UUID.String()), VisibleDevices: twoGPUs()[0].UUID.String()}
	if err := h.runner.Start(ctx, env); err != nil {
		t.Fatal(err)
	}
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := h.runner.ExactDefaults(h.pipeDir(0)); err != nil || got != want {
		t.Fatalf("restarted daemon after a reconcile: %+v, %v; want %+v", got, err, want)
	}
}
