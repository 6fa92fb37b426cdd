package agent

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// eightWithQoS splits GPU 0 in 8 with slice 0 for a latency-bound tenant,
// GPU 1 in 2 without QoS.
const eightWithQoS = `devices:
- path: 0000:1A:00.0
  type: NVIDIA_MPS
  virtual_number: 8
  mps_qos:
    latency: [0]
- path: GPU-00000001-AAAA-BBBB-CCCC-DDDDDDDDDDDD
  type: NVIDIA_MPS
  virtual_number: 2
`

// specEnv is each device's environment in the host's CDI spec, by name.
func (h *harness) specEnv(t *testing.T) map[string]map[string]string {
	t.Helper()
	var spec struct {
		Devices []struct {
			Name           string `yaml:"name"`
			ContainerEdits struct {
				Env []string `yaml:"env"`
			} `yaml:"containerEdits"`
		} `yaml:"devices"`
	}
	if err := yaml.Unmarshal([]byte(h.cdiSpec(t)), &spec); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	for _, d := range spec.Devices {
		env := map[string]string{}
		for _, kv := range d.ContainerEdits.Env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		out[d.Name] = env
	}
	return out
}

// TestQoSSlicesReachEveryEdge: under auto (400/N, 50% at N=8) an entry
// with mps_qos latency [0] gives device 0 the GPU's share at normal
// priority and the seven others 13% (7 x 13 = 91: 8% of the SMs left to
// device 0) below normal, in the CDI spec, the inventory rows, /status,
// `mps-daemon status` and /metrics; the control daemon holds 50% and
// priority 1; GPU 1 stays as it was.
func TestQoSSlicesReachEveryEdge(t *testing.T) {
	h := newHarness(t, "", eightWithQoS)
	h.cfg.Host.ThreadPercentage = "auto"
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	g0, g1 := twoGPUs()[0].UUID, twoGPUs()[1].UUID
	want := map[string][2]int{vdev.Name(g1, 0): {100, 0}, vdev.Name(g1, 1): {100, 0}}
	for i := range 8 {
		want[vdev.Name(g0, i)] = [2]int{13, 1}
	}
	want[vdev.Name(g0, 0)] = [2]int{50, 0}

	env := h.specEnv(t)
	for name, w := range want {
		e := env[name]
		if e == nil || e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != fmt.Sprint(w[0]) || e["CUDA_MPS_CLIENT_PRIORITY"] != fmt.Sprint(w[1]) {
			t.Errorf("spec entry %s: env %v, want thread %d%% priority %d", name, e, w[0], w[1])
		}
	}
	for _, r := range h.devices() {
		uuid, i, _ := rowName(r)
		if w := want[vdev.Name(uuid, i)]; r.MPSThreadPercentage != w[0] {
			t.Errorf("inventory row %s: mps_thread_percentage %d, want %d", r.Addr, r.MPSThreadPercentage, w[0])
		}
	}
	st := h.agent.Status()
	for name, w := range want {
		d := st.device(name)
		class := map[string]string{vdev.Name(g0, 0): "latency"}[name]
		if strings.HasPrefix(name, g0) && class == "" {
			class = "batch"
		}
		if d == nil || d.ThreadPercentage != w[0] || d.ClientPriority != w[1] || d.QoSClass != class {
			t.Errorf("/status device %s: %+v, want %d%% priority %d class %q", name, d, w[0], w[1], class)
		}
	}
	if g := st.GPUs[0]; g.ThreadPercentage != 50 || g.ClientPriority != 1 || g.QoS == nil || !slices.Equal(g.QoS.LatencySlices, []int{0}) || g.QoS.BatchThreadPercentage != 13 {
		t.Errorf("/status GPU 0: %+v %+v", g, g.QoS)
	}
	if g := st.GPUs[1]; g.ThreadPercentage != 100 || g.ClientPriority != 0 || g.QoS != nil {
		t.Errorf("/status GPU 1: %+v", g)
	}
	for i, w := range []mps.Limits{{ThreadPercentage: 50, ClientPriority: 1}, {ThreadPercentage: 100}} {
		got, err := h.controlDefaults(i)
		if err != nil || got.ThreadPercentage != w.ThreadPercentage || got.ClientPriority != w.ClientPriority {
			t.Errorf("GPU %d's control daemon holds %+v (%v), want thread %.0f%% priority %d", i, got, err, w.ThreadPercentage, w.ClientPriority)
		}
	}
	var view bytes.Buffer
	if err := WriteStatus(&view, st, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"latency [0], batch 13% prio 1", "50%      latency, prio 0", "13%      batch, prio 1"} {
		if !strings.Contains(view.String(), w) {
			t.Errorf("mps-daemon status lacks %q:\n%s", w, view.String())
		}
	}
}

// TestPriorityChangeRestartsIdleServers: servers keep the default client
// priority they started with (the control has no per-server priority).
// When mps_qos goes away, the default returns to 0; a server busy with a
// client is reported and left alone, and shut down once idle, so the next
// client starts one at the new default. Nothing flaps meanwhile.
func TestPriorityChangeRestartsIdleServers(t *testing.T) {
	h := newHarness(t, "", eightWithQoS)
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	srv, err := h.runner.AddClient(h.pipeDir(0), 4001)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := h.runner.EnforcedLimits(h.pipeDir(0), srv); l.ClientPriority != 1 {
		t.Fatalf("server started under mps_qos: priority %d, want 1", l.ClientPriority)
	}
	h.cfg.Devices = mustDevices(t, h.dir, fourAndTwo)
	for range 2 { // twice: the second reconcile changes nothing
		if err := h.agent.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		if g := h.agent.Status().GPUs[0]; g.ClientPriority != 0 || !g.Healthy || !slices.Equal(g.ServersAtOldPriority, []int{srv}) {
			t.Fatalf("GPU 0: priority %d healthy %v old-priority servers %v; want 0, healthy, [%d]", g.ClientPriority, g.Healthy, g.ServersAtOldPriority, srv)
		}
	}
	if d, err := h.controlDefaults(0); err != nil || d.ClientPriority != 0 {
		t.Errorf("control default %+v, %v; want priority 0", d, err)
	}
	if err := h.runner.RemoveClient(h.pipeDir(0), 4001); err != nil {
		t.Fatal(err)
	}
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if g := h.agent.Status().GPUs[0]; len(g.ServersAtOldPriority) != 0 || len(g.Servers) != 1 {
		t.Errorf("GPU 0 after its server went idle: %+v", g)
	}
	ctl := mps.NewController(h.runner, mps.Env{PipeDir: h.pipeDir(0)}, 5*time.Second, nil)
	if servers, err := ctl.Servers(ctx); err != nil || len(servers) != 0 {
		t.Errorf("servers %v, %v; want the idle one shut down", servers, err)
	}
	srv2, err := h.runner.AddClient(h.pipeDir(0), 4002)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := h.runner.EnforcedLimits(h.pipeDir(0), srv2); l.ClientPriority != 0 {
		t.Errorf("the next server: priority %d, want 0", l.ClientPriority)
	}
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if servers, _ := ctl.Servers(ctx); !slices.Equal(servers, []int{srv2}) {
		t.Errorf("servers %v: the new one must be left alone", servers)
	}
}

// TestAdoptedDaemonAtPriorityOne: a control daemon left by an earlier
// configuration (or by hand) holding priority 1 is set back to 0 and read
// back, and its idle server is restarted.
func TestAdoptedDaemonAtPriorityOne(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	ctx := context.Background()
	ctl := mps.NewController(h.runner, mps.Env{PipeDir: h.pipeDir(0), VisibleDevices: twoGPUs()[0].UUID}, 5*time.Second, nil)
	if _, err := ctl.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ctl.SetDefaults(ctx, mps.Limits{PinnedMemMiB: 1024, ThreadPercentage: 100, ClientPriority: 1}); err != nil {
		t.Fatal(err)
	}
	srv, err := h.runner.AddClient(h.pipeDir(0), 4001)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.runner.RemoveClient(h.pipeDir(0), 4001); err != nil {
		t.Fatal(err)
	}
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if d, err := h.controlDefaults(0); err != nil || d.ClientPriority != 0 {
		t.Errorf("adopted daemon: %+v, %v; want priority 0", d, err)
	}
	if servers, _ := ctl.Servers(ctx); slices.Contains(servers, srv) {
		t.Errorf("the idle server started at priority 1 still runs: %v", servers)
	}
}
