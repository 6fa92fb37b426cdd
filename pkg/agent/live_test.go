package agent

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
)

// recordingNotifier keeps what would have gone to systemd.
type recordingNotifier struct {
	mu   sync.Mutex
	msgs []string
	// onReady runs when READY=1 arrives, to look at the world at that moment.
	onReady func()
}

func (n *recordingNotifier) Notify(state string) error {
	n.mu.Lock()
	n.msgs = append(n.msgs, state)
	f := n.onReady
	n.mu.Unlock()
	if state == "READY=1" && f != nil {
		f()
	}
	return nil
}

func (n *recordingNotifier) all() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.msgs...)
}

func (h *harness) byAddr() map[string]api.IsolatedDevice {
	m := map[string]api.IsolatedDevice{}
	for _, d := range h.devices() {
		m[d.Addr] = d
	}
	return m
}

// writeConfig puts host.conf and the device YAML on disk, for reloads.
func (h *harness) writeConfig(t testing.TB, devices string) {
	t.Helper()
	hc := filepath.Join(h.dir, "host.conf")
	df := filepath.Join(h.dir, "devices.yml")
	conf := append(h.fixture(t, "host.conf", ""), h.fixture(t, "host-files.conf", "")...)
	if err := os.WriteFile(hc, conf, 0o644); err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, df, devices)
	h.agent.opts.ConfigPath = hc
}

// writeAtomic saves like an editor: a new file renamed over the old one.
func writeAtomic(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".swp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// yamlFor is fourAndTwo with other virtual numbers.
func yamlFor(n0, n1 int) string {
	return strings.NewReplacer("virtual_number: 4", "virtual_number: "+strconv.Itoa(n0), "virtual_number: 2", "virtual_number: "+strconv.Itoa(n1)).Replace(fourAndTwo)
}

func TestResizeDownKeepsAHeldDeviceUntilReleased(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	held := h.byAddr()["1a:00.0-3"]
	if _, err := h.inv.AttachIsolatedDevice(ctx, "pod-a", held.ID); err != nil {
		t.Fatal(err)
	}
	// A client of pod-a runs on GPU 0's server, started with the 4-way caps.
	server, err := h.runner.AddClient(h.pipeDir(0), 4242)
	if err != nil {
		t.Fatal(err)
	}

	h.cfg.Devices = mustDevices(t, h.dir, yamlFor(2, 2))
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	devs := h.byAddr()
	if _, ok := devs["1a:00.0-2"]; ok {
		t.Error("free device 1a:00.0-2 should be gone after 4 -> 2")
	}
	if d, ok := devs["1a:00.0-3"]; !ok || !d.PendingRemoval || d.GuestID != "pod-a" {
		t.Errorf("held device 1a:00.0-3 must stay, marked pending removal: %+v", d)
	}
	if d := devs["1a:00.0-0"]; d.MPSMemoryLimit != int(h200Memory/2) || d.MPSThreadPercentage != 50 {
		t.Errorf("remaining devices should carry the 2-way caps: %+v", d)
	}
	// The running server was given the new caps, the defaults too.
	if enf, err := h.runner.EnforcedLimits(h.pipeDir(0), server); err != nil || enf.MemoryLimit != h200Memory/2 || enf.ThreadPercentage != 50 {
		t.Errorf("running server enforces %+v (%v), want the 2-way caps", enf, err)
	}

	if _, err := h.inv.DetachIsolatedDevice(ctx, "pod-a", held.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.byAddr()["1a:00.0-3"]; ok {
		t.Error("1a:00.0-3 should go once released")
	}
	if n := len(h.devices()); n != 4 {
		t.Errorf("%d devices, want 2+2", n)
	}
}

func mustDevices(t *testing.T, dir, yaml string) *config.DeviceFile {
	t.Helper()
	df, err := config.ParseDevices(filepath.Join(dir, "devices.yml"), []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return df
}

func TestGPURemovedFromConfigKeepsMPSWhileHeld(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	held := h.byAddr()["db:00.0-1"]
	if _, err := h.inv.AttachIsolatedDevice(ctx, "pod-b", held.ID); err != nil {
		t.Fatal(err)
	}
	h.cfg.Devices = mustDevices(t, h.dir, "devices:\n- path: 0000:1a:00.0\n  type: NVIDIA_MPS\n  virtual_number: 4\n")
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	ctl := mps.NewController(h.runner, mps.Env{PipeDir: h.pipeDir(1)}, 5*time.Second, nil)
	if up, _ := ctl.Running(ctx); !up {
		t.Fatal("GPU 1's MPS daemon must keep running while pod-b holds one of its devices")
	}
	if st := h.agent.Status(); len(st.Retiring) != 1 || st.Retiring[0] != twoGPUs()[1].UUID.String() {
		t.Errorf("status should list GPU 1 as retiring: %+v", st.Retiring)
	}
	if _, err := h.inv.DetachIsolatedDevice(ctx, "pod-b", held.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if up, _ := ctl.Running(ctx); up {
		t.Error("GPU 1's MPS daemon should stop once nothing holds its devices")
	}
	for _, d := range h.devices() {
		if d.DevicePath == twoGPUs()[1].UUID.String() {
			t.Errorf("device of the removed GPU left behind: %+v", d)
		}
	}
}

func TestDeadControlDaemonIsRestartedWithItsLimits(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	h.runner.Kill(h.pipeDir(1)) // kill -9
	if !h.agent.mps.probe(ctx) {
		t.Fatal("the probe should notice a dead control daemon")
	}
	// What the loop runs after a probe that saw a change.
	if err := h.agent.reconcileChanged(ctx); err != nil {
		t.Fatal(err)
	}
	lim, err := h.controlDefaults(1)
	if err != nil || lim.ThreadPercentage != 50 || mps.DisplayMemLimit(lim.MemoryLimit) != mps.DisplayMemLimit(h200Memory/2) {
		t.Fatalf("restarted daemon holds %+v (%v), want the GPU's caps", lim, err)
	}
	if h.agent.mps.probe(ctx) {
		t.Error("nothing changed since the repair; the probe should say so")
	}
}

func TestFaultMarksDevicesUnhealthyUntilTheClientsAreGone(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.runner.AddClient(h.pipeDir(0), 501); err != nil {
		t.Fatal(err)
	}
	if _, err := h.runner.AddClient(h.pipeDir(0), 502); err != nil {
		t.Fatal(err)
	}
	if err := h.runner.Fault(h.pipeDir(0), 502); err != nil {
		t.Fatal(err)
	}
	if !h.agent.mps.probe(ctx) {
		t.Fatal("the probe should notice a server in FAULT")
	}
	if err := h.agent.reconcileChanged(ctx); err != nil {
		t.Fatalf("a FAULT is a health state, not a reconcile failure: %v", err)
	}
	for _, d := range h.devices() {
		if bad := d.DevicePath == twoGPUs()[0].UUID.String(); d.Unhealthy != bad {
			t.Errorf("%s unhealthy=%v during GPU 0's fault", d.Addr, d.Unhealthy)
		}
	}
	if spec := h.cdiSpec(t); strings.Contains(spec, twoGPUs()[0].UUID.String()+"::0") || !strings.Contains(spec, twoGPUs()[1].UUID.String()+"::0") {
		t.Error("the CDI spec must drop the faulted GPU's devices and keep the others")
	}
	// Not handed out meanwhile.
	if _, err := h.inv.AttachIsolatedDevices(ctx, "pod-c", api.AttachRequest{Host: "node-1", Model: "NVIDIA H200", Count: 5}); err == nil {
		t.Error("5 devices attached while only 2 are healthy")
	}
	if err := h.runner.RemoveClient(h.pipeDir(0), 502); err != nil {
		t.Fatal(err)
	}
	if !h.agent.mps.probe(ctx) {
		t.Fatal("the probe should notice the recovery")
	}
	if err := h.agent.reconcileChanged(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range h.devices() {
		if d.Unhealthy {
			t.Errorf("%s still unhealthy after the recovery", d.Addr)
		}
	}
	if !strings.Contains(h.cdiSpec(t), twoGPUs()[0].UUID.String()+"::0") {
		t.Error("the recovered GPU's devices should be back in the CDI spec")
	}
}

func (h *harness) cdiSpec(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.dir, "cdi", "yunion.io-mps-gpu.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRunFollowsEditsAndRejectsBadOnes(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	h.writeConfig(t, fourAndTwo)
	cfg, err := LoadConfig(h.agent.opts.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	h.agent.cfg = cfg
	h.agent.opts.WatchFiles = true
	n := &recordingNotifier{}
	n.onReady = func() {
		if got := len(h.devices()); got != 6 {
			t.Errorf("READY=1 sent with %d of 6 devices registered", got)
		}
	}
	h.agent.notify = n
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.agent.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitFor(t, "6 devices", func() bool { return len(h.devices()) == 6 })

	// A broken edit: nothing changes, the error is visible.
	writeAtomic(t, cfg.Host.ContainerDeviceConfigFile, "devices:\n- path: 0000:1a:00.0\n  type: NVIDIA_MPS\n  virtual_number: 0\n")
	waitFor(t, "config error in status", func() bool { return strings.Contains(h.agent.Status().ConfigError, "devices.yml:4") })
	if len(h.devices()) != 6 {
		t.Error("a rejected edit changed the inventory")
	}
	if !hasMsg(n.all(), "STATUS=", "config error") {
		t.Errorf("systemd status should show the config error: %q", n.all())
	}

	// A good edit: applied without a restart.
	writeAtomic(t, cfg.Host.ContainerDeviceConfigFile, yamlFor(8, 2))
	waitFor(t, "10 devices", func() bool { return len(h.devices()) == 10 })
	st := h.agent.Status()
	if st.ConfigError != "" || st.ConfigGeneration != 2 {
		t.Errorf("after a good edit: %+v", st)
	}
	msgs := n.all()
	if !hasMsg(msgs, "RELOADING=1", "") || strings.Count(strings.Join(msgs, "\n"), "READY=1") < 2 {
		t.Errorf("reloads should be framed by RELOADING=1 ... READY=1: %q", msgs)
	}
}

func hasMsg(msgs []string, prefix, contains string) bool {
	for _, m := range msgs {
		if strings.HasPrefix(m, prefix) && strings.Contains(m, contains) {
			return true
		}
	}
	return false
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTeardownRestoresComputeModesAndRefusesBusyGPUs(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	h.backend.gpus[1].ComputeMode = gpu.ComputeModeProhibited
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.runner.AddClient(h.pipeDir(0), 777); err != nil {
		t.Fatal(err)
	}
	// Teardown runs in a process of its own (the service stopped): a new
	// agent on the same host.
	fresh, err := New(h.agent.opts)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	err = fresh.Teardown(ctx, false, &out)
	if err == nil || !strings.Contains(err.Error(), "1 MPS clients connected") {
		t.Fatalf("teardown with a connected client must refuse, got %v", err)
	}
	if len(h.devices()) != 6 {
		t.Fatal("a refused teardown changed the inventory")
	}
	if err := fresh.Teardown(ctx, true, &out); err != nil {
		t.Fatal(err)
	}
	if n := len(h.devices()); n != 0 {
		t.Errorf("%d devices left after teardown", n)
	}
	for i := range 2 {
		if up, _ := mps.NewController(h.runner, mps.Env{PipeDir: h.pipeDir(i)}, 5*time.Second, nil).Running(ctx); up {
			t.Errorf("GPU %d's control daemon still runs", i)
		}
	}
	if h.backend.gpus[0].ComputeMode.String() != "Default" || h.backend.gpus[1].ComputeMode.String() != "Prohibited" {
		t.Errorf("compute modes not restored: %v %v", h.backend.gpus[0].ComputeMode, h.backend.gpus[1].ComputeMode)
	}
	if !strings.Contains(out.String(), "compute mode restored to Prohibited") {
		t.Errorf("teardown should say what it did:\n%s", out.String())
	}
}

// A host switched to the single layout still runs the per-GPU daemons of
// before (until they are retired): teardown stops those, each in its own
// directory, not the pipe root's daemon once per GPU.
func TestTeardownInTheSingleLayoutStopsPerGPUDaemonsLeftBehind(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	hc := *h.cfg.Host
	hc.PipeLayout = config.LayoutSingle
	opts := h.agent.opts
	opts.Config = &Config{Host: &hc, Devices: h.cfg.Devices}
	fresh, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := fresh.Teardown(ctx, true, &out); err != nil {
		t.Fatalf("teardown: %v\n%s", err, out.String())
	}
	for i := range 2 {
		if up, _ := mps.NewController(h.runner, mps.Env{PipeDir: h.pipeDir(i)}, 5*time.Second, nil).Running(ctx); up {
			t.Errorf("GPU %d's per-GPU control daemon still runs after teardown said:\n%s", i, out.String())
		}
	}
}

func TestRestartOnlyKeysKeepTheirRunningValues(t *testing.T) {
	cur, err := config.ParseHostConf("host.conf", []byte("mps_listen_address: 127.0.0.1:9331\nmps_multiuser_server: true\nmps_health_interval: 10s\ncuda_mps_replicas: 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	next, err := config.ParseHostConf("host.conf", []byte("mps_listen_address: 127.0.0.1:1\nmps_multiuser_server: false\nmps_health_interval: 1s\ncuda_mps_replicas: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	kept := keepRestartOnly(cur, next)
	if strings.Join(kept, ",") != "mps_listen_address,mps_multiuser_server,mps_health_interval" {
		t.Errorf("kept %v", kept)
	}
	if next.ListenAddress != "127.0.0.1:9331" || !next.MultiUserServer || next.HealthInterval != 10*time.Second || next.CudaMPSReplicas != 2 {
		t.Errorf("restart-only keys must keep their running values, others take the new ones: %+v", next)
	}
}
