package agent

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/statusview"
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
	out := map[string]map[string]string{}
	for name, e := range h.cdiEntries(t) {
		out[name] = e.Env
	}
	return out
}

// TestQoSSlicesReachEveryEdge: under auto (400/N, 50% at N=8) an entry
// with mps_qos latency [0] gives device 0 the even share (12%) at normal
// priority and the seven others 13% ((100 - 4) / 7 under the default
// reserve; 7 x 13 = 91) below normal, in the CDI spec, the inventory
// rows, /status, `mps-daemon status` and /metrics; the control daemon
// holds the largest, 13%, and priority 1; GPU 1 stays as it was.
func TestQoSSlicesReachEveryEdge(t *testing.T) {
	h := newHarness(t, "", eightWithQoS)
	h.cfg.Host.Threads = config.AutoThreads
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	g0, g1 := twoGPUs()[0].UUID, twoGPUs()[1].UUID
	want := map[string][2]int{vdev.NameOf(g1, 0).String(): {100, 0}, vdev.NameOf(g1, 1).String(): {100, 0}}
	for i := range 8 {
		want[vdev.NameOf(g0, i).String()] = [2]int{13, 1}
	}
	want[vdev.NameOf(g0, 0).String()] = [2]int{12, 0}

	env := h.specEnv(t)
	for name, w := range want {
		e := env[name]
		if e == nil || e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != fmt.Sprint(w[0]) || e["CUDA_MPS_CLIENT_PRIORITY"] != fmt.Sprint(w[1]) {
			t.Errorf("spec entry %s: env %v, want thread %d%% priority %d", name, e, w[0], w[1])
		}
	}
	for _, r := range h.devices() {
		_, i, _ := api.ParseSliceAddr(r.Addr)
		if w := want[vdev.NameOf(gpu.UUID(r.DevicePath), i).String()]; r.MPSThreadPercentage != w[0] {
			t.Errorf("inventory row %s: mps_thread_percentage %d, want %d", r.Addr, r.MPSThreadPercentage, w[0])
		}
	}
	st := h.agent.Status()
	for name, w := range want {
		d := deviceOf(st, name)
		class := map[string]string{vdev.NameOf(g0, 0).String(): "latency"}[name]
		if strings.HasPrefix(name, g0.String()) && class == "" {
			class = "batch"
		}
		if d == nil || d.ThreadPercentage != w[0] || d.ClientPriority != w[1] || d.QoSClass != class {
			t.Errorf("/status device %s: %+v, want %d%% priority %d class %q", name, d, w[0], w[1], class)
		}
	}
	if g := st.GPUs[0]; g.ThreadPercentage != 13 || g.ClientPriority != 1 || g.QoS == nil || !slices.Equal(g.QoS.LatencySlices, []int{0}) || g.QoS.BatchThreadPercentage != 13 {
		t.Errorf("/status GPU 0: %+v %+v", g, g.QoS)
	}
	if g := st.GPUs[1]; g.ThreadPercentage != 100 || g.ClientPriority != 0 || g.QoS != nil {
		t.Errorf("/status GPU 1: %+v", g)
	}
	for i, w := range []mps.Limits{{ThreadPercentage: 13, ClientPriority: 1}, {ThreadPercentage: 100}} {
		got, err := h.controlDefaults(i)
		if err != nil || got.ThreadPercentage != w.ThreadPercentage || got.ClientPriority != w.ClientPriority {
			t.Errorf("GPU %d's control daemon holds %+v (%v), want thread %.0f%% priority %d", i, got, err, w.ThreadPercentage, w.ClientPriority)
		}
	}
	var view bytes.Buffer
	if err := statusview.Write(&view, st, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"latency [0], batch 13% prio 1", "12%      latency, prio 0", "13%      batch, prio 1"} {
		if !strings.Contains(view.String(), w) {
			t.Errorf("mps-daemon status lacks %q:\n%s", w, view.String())
		}
	}
}

// TestPriorityChangeLeavesServersRunning: a running MPS server gives the
// clients that connect after the default client priority changed the new
// default (docs/gpu-runs/qos-probe-running.md). When mps_qos goes away the
// default returns to 0 and is read back; the server busy with a client
// runs on, healthy, and serves its next client at 0. Nothing flaps.
func TestPriorityChangeLeavesServersRunning(t *testing.T) {
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
	ctl := mps.NewController(h.runner, mps.Env{PipeDir: h.pipeDir(0)}, 5*time.Second, nil)
	for range 2 { // twice: the second reconcile changes nothing
		if err := h.agent.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		if g := h.agent.Status().GPUs[0]; g.ClientPriority != 0 || !g.Healthy || len(g.Servers) != 1 || g.Servers[0].PID != srv {
			t.Fatalf("GPU 0: priority %d healthy %v servers %+v; want 0, healthy, server %d", g.ClientPriority, g.Healthy, g.Servers, srv)
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
	if servers, err := ctl.Servers(ctx); err != nil || !slices.Equal(servers, []int{srv}) {
		t.Errorf("servers %v, %v; want the idle one left running", servers, err)
	}
	if l, _ := h.runner.EnforcedLimits(h.pipeDir(0), srv); l.ClientPriority != 0 {
		t.Errorf("the running server's next client: priority %d, want 0", l.ClientPriority)
	}
}

// TestAdoptedDaemonAtPriorityOne: a control daemon left by an earlier
// configuration (or by hand) holding priority 1 is set back to 0 and read
// back; its server runs on and serves new clients at 0.
func TestAdoptedDaemonAtPriorityOne(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	ctx := context.Background()
	ctl := mps.NewController(h.runner, mps.Env{PipeDir: h.pipeDir(0), VisibleDevices: twoGPUs()[0].UUID.String()}, 5*time.Second, nil)
	if _, err := ctl.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ctl.SetDefaults(ctx, mps.Limits{MemoryLimit: 1024, ThreadPercentage: 100, ClientPriority: 1}); err != nil {
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
	if servers, _ := ctl.Servers(ctx); !slices.Equal(servers, []int{srv}) {
		t.Errorf("servers %v; want the adopted daemon's server %d left running", servers, srv)
	}
	if l, _ := h.runner.EnforcedLimits(h.pipeDir(0), srv); l.ClientPriority != 0 {
		t.Errorf("its next client: priority %d, want 0", l.ClientPriority)
	}
}

// TestQoSEscapeTerminatedUnderEnforce: on GPU 0 (slice 0 latency, 1-7
// batch at 13% below normal), a container of batch device ::1 runs one
// process with its device's environment and one started without
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and with CUDA_MPS_CLIENT_PRIORITY=0
// (`env -u ... CUDA_MPS_CLIENT_PRIORITY=0 python ...`); the latency
// device's container runs a process with no QoS variable at all. The
// escape is reported in /status, `mps-daemon status` and /metrics and
// terminated; the others are untouched.
func TestQoSEscapeTerminatedUnderEnforce(t *testing.T) {
	h := newHarness(t, "mps_accounting: enforce\n", eightWithQoS)
	h.cfg.Host.Threads = config.AutoThreads
	killer := &signals{}
	h.withFakeProc(t, killer)
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	g0 := twoGPUs()[0].UUID
	lat, b1 := vdev.NameOf(g0, 0).String(), vdev.NameOf(g0, 1).String()
	cl, cb := h.newContainer(t, "31", lat), h.newContainer(t, "32", b1)
	h.writeProc(t, 301, 1, 1000, lat, cl)
	h.writeProc(t, 311, 1, 1100, b1, cb)
	h.writeProc(t, 312, 311, 1200, b1, cb)
	environ := func(pid int, entries ...string) {
		t.Helper()
		b := []byte("PATH=/usr/bin\x00")
		for _, e := range entries {
			b = append(append(b, e...), 0)
		}
		if err := os.WriteFile(filepath.Join(h.cfg.Host.ProcRoot, fmt.Sprint(pid), "environ"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	environ(301, vdev.EnvVar+"="+lat)
	environ(311, vdev.EnvVar+"="+b1, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=13", "CUDA_MPS_CLIENT_PRIORITY=1")
	environ(312, vdev.EnvVar+"="+b1, "CUDA_MPS_CLIENT_PRIORITY=0")
	for _, pid := range []int{301, 311, 312} {
		if _, err := h.runner.AddClient(h.pipeDir(0), pid); err != nil {
			t.Fatal(err)
		}
	}
	h.backend.mu.Lock()
	h.backend.procs = map[gpu.UUID][]gpu.Process{g0: {{PID: 301, UsedMemoryBytes: 1 << 30}, {PID: 311, UsedMemoryBytes: 1 << 30}, {PID: 312, UsedMemoryBytes: 1 << 30}}}
	h.backend.mu.Unlock()

	h.agent.account(ctx)

	clients, err := mps.NewController(h.runner, mps.Env{PipeDir: h.pipeDir(0)}, 5*time.Second, nil).ClientServers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for pid, want := range map[int]bool{301: true, 311: true, 312: false} {
		if _, there := clients[pid]; there != want {
			t.Errorf("client %d connected=%v after enforcement, want %v", pid, there, want)
		}
	}
	st := h.agent.Status()
	a := st.Accounting
	if a == nil || len(a.QoSEscapes) != 1 || a.QoSEscapes[0].PID != 312 || a.QoSEscapes[0].Device != b1 ||
		!strings.Contains(a.QoSEscapes[0].Reason, "CUDA_MPS_CLIENT_PRIORITY=0 raises it") {
		t.Fatalf("accounting status %+v, want PID 312 alone as a QoS escape", a)
	}
	if d := deviceOf(st, b1); d == nil || d.OverCap || d.LastStep != "terminate_client" {
		t.Errorf("%s: %+v; under its memory cap, its escaping client terminated", b1, d)
	}
	var view bytes.Buffer
	if err := statusview.Write(&view, st, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(view.String(), "1 MPS client escaping its device's QoS") || !strings.Contains(view.String(), `312  `+b1+`  unset        "0"`) {
		t.Errorf("mps-daemon status does not show the escape:\n%s", view.String())
	}
	srv := httptest.NewServer(h.agent.Handler())
	defer srv.Close()
	body := scrapeAgent(t, srv.URL)
	for _, want := range []string{`mps_daemon_accounting_qos_escapes{Hostname="node-1"} 1`,
		`mps_daemon_enforcement_steps_total{Hostname="node-1",cause="qos_escape",step="terminate_client"} 1`,
		`mps_virtual_device_client_priority{Hostname="node-1",UUID="` + g0.String() + `",addr="1a:00.0-1"`,
		`mps_gpu_default_client_priority{Hostname="node-1",UUID="` + g0.String() + `"`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	for _, s := range killer.sent {
		if !strings.HasPrefix(s, "312:") {
			t.Errorf("signalled %s", s)
		}
	}
}
