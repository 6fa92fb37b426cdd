package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/devsync"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/inventory/client"
	"yunion.io/x/mps-daemon/pkg/inventory/server"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
	"yunion.io/x/mps-daemon/pkg/pci"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/units"
)

// fakeBackend stands in for NVML: the GPU is the one thing CI simulates.
type fakeBackend struct {
	mu       sync.Mutex
	gpus     []gpu.Info
	setModes []string
	setErr   error
	procs    map[gpu.UUID][]gpu.Process
}

func (b *fakeBackend) Devices(context.Context) ([]gpu.Info, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]gpu.Info(nil), b.gpus...), nil
}

func (b *fakeBackend) SetComputeMode(_ context.Context, uuid gpu.UUID, m gpu.ComputeMode) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.setErr != nil {
		return b.setErr
	}
	for i := range b.gpus {
		if b.gpus[i].UUID == uuid {
			b.gpus[i].ComputeMode = m
			b.setModes = append(b.setModes, uuid.String()+"="+m.String())
			return nil
		}
	}
	return fmt.Errorf("no GPU %s", uuid)
}

// MPSProcesses lists what a test put in procs (NVML's MPS clients per GPU).
func (b *fakeBackend) MPSProcesses(_ context.Context, uuid gpu.UUID) ([]gpu.Process, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]gpu.Process(nil), b.procs[uuid]...), nil
}

func (b *fakeBackend) Close() error { return nil }

// h200Memory is an H200's memory.total as NVML reports it in MiB; a virtual
// device of one split in N is capped at h200Memory / N: 35942 MiB at N=4,
// 71885 at N=2.
const h200Memory units.MiB = 143771

func twoGPUs() []gpu.Info {
	mk := func(i int, bus uint8) gpu.Info {
		return gpu.Info{
			Index: i, Minor: i, UUID: gpu.UUID(fmt.Sprintf("GPU-0000000%d-aaaa-bbbb-cccc-dddddddddddd", i)), Name: "NVIDIA H200",
			PCI: pci.Address{Bus: bus}, PCIVendorID: 0x10de, PCIDeviceID: 0x2335, MemoryTotal: h200Memory.Bytes(),
			Architecture: gpu.ArchHopper, NUMANode: -1, PCIeGeneration: 5, PCIeWidth: 16,
		}
	}
	return []gpu.Info{mk(0, 0x1a), mk(1, 0xdb)}
}

// recordingInventory is the real client, plus a check made at the moment of
// each sync: every device offered must have its caps already enforced by MPS.
type recordingInventory struct {
	*client.Client
	check func(desired []api.IsolatedDevice) error
	fail  error
}

func (r *recordingInventory) SyncDevices(ctx context.Context, hostID string, desired []api.IsolatedDevice) (devsync.Result, error) {
	if r.fail != nil {
		return devsync.Result{}, r.fail
	}
	if r.check != nil {
		if err := r.check(desired); err != nil {
			return devsync.Result{}, err
		}
	}
	return r.Client.SyncDevices(ctx, hostID, desired)
}

type harness struct {
	t   testing.TB
	dir string
	// inventoryURL is the inventory's loopback server.
	inventoryURL string
	backend      *fakeBackend
	runner       *mpssim.Runner
	inv          *recordingInventory
	agent        *Agent
	cfg          *Config
}

// newHarness builds an agent over a fake NVML, the simulated MPS control and
// a real inventory (SQLite file, HTTP on loopback, the real client).
func newHarness(t testing.TB, hostConf, devices string) *harness {
	t.Helper()
	dir, err := os.MkdirTemp("", "agt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// A copy of a migrated empty database (storetest.SQLiteDSN): the
	// migration alone is about 290 ms under -race, and most tests here
	// make a harness.
	st := storetest.Open(t, storetest.SQLiteDSN(t))
	srv := httptest.NewServer(server.New(st, server.Options{}, slog.New(slog.DiscardHandler)))
	t.Cleanup(srv.Close)
	// An admin token: the tests also attach and detach (the scheduler's
	// part) through this client.
	token, _, err := st.CreateToken(context.Background(), store.NewToken{Name: "agent tests", Role: store.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}

	h := &harness{t: t, dir: dir, inventoryURL: srv.URL, backend: &fakeBackend{gpus: twoGPUs()}, runner: mpssim.New(slog.New(slog.DiscardHandler))}
	hcParsed, err := config.ParseHostConf(filepath.Join(dir, "host.conf"), h.fixture(t, "host.conf", hostConf))
	if err != nil {
		t.Fatal(err)
	}
	h.cfg = &Config{Host: hcParsed}
	if devices != "" {
		df, err := config.ParseDevices(filepath.Join(dir, "devices.yml"), []byte(devices))
		if err != nil {
			t.Fatal(err)
		}
		h.cfg.Devices = df
	}
	h.inv = &recordingInventory{Client: client.New(client.Options{URL: srv.URL, Token: token, Retries: -1})}
	h.agent, err = New(Options{Config: h.cfg, Backend: h.backend, Runner: h.runner, Devices: backend.NewRows(context.Background(), h.inv, "", nil), SysfsRoot: dir + "/nosys", DevRoot: dir + "/nodev"})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// logTo makes h's agent anew, its options as they are, logging to w: the
// agent and every station of its row.
func (h *harness) logTo(t testing.TB, w io.Writer) {
	t.Helper()
	o := h.agent.opts
	o.Log = slog.New(slog.NewTextHandler(w, nil))
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	h.agent = a
}

// fixture is testdata/<name> with $DIR and $INVENTORY set to the
// harness's, then extra.
func (h *harness) fixture(t testing.TB, name, extra string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"DIR": h.dir, "INVENTORY": h.inventoryURL}
	return []byte(os.Expand(string(b), func(k string) string { return vars[k] }) + extra)
}

func (h *harness) pipeDir(i int) string {
	return filepath.Join(h.dir, "pipe", twoGPUs()[i].UUID.String())
}

func (h *harness) devices() []api.IsolatedDevice {
	h.t.Helper()
	l, err := h.inv.ListIsolatedDevices(context.Background(), client.ListOptions{Limit: 100})
	if err != nil {
		h.t.Fatal(err)
	}
	return l.IsolatedDevices
}

// controlDefaults reads a GPU's default limits the way an operator would,
// through the (simulated) control daemon.
func (h *harness) controlDefaults(i int) (mps.Limits, error) {
	c := mps.NewController(h.runner, mps.Env{PipeDir: h.pipeDir(i), VisibleDevices: twoGPUs()[i].UUID.String()}, 5*time.Second, nil)
	return c.Defaults(context.Background())
}

const fourAndTwo = `devices:
- path: 0000:1A:00.0
  type: NVIDIA_MPS
  virtual_number: 4
- path: GPU-00000001-AAAA-BBBB-CCCC-DDDDDDDDDDDD
  type: NVIDIA_MPS
  virtual_number: 2
`

func TestCapsAreEnforcedBeforeAnyDeviceIsOffered(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	checked := 0
	h.inv.check = func(desired []api.IsolatedDevice) error {
		for _, d := range desired {
			i := 0
			if d.DevicePath == twoGPUs()[1].UUID.String() {
				i = 1
			}
			lim, err := h.controlDefaults(i)
			if err != nil {
				return fmt.Errorf("device %s offered before its control daemon answers: %w", d.Addr, err)
			}
			// The control reads limits back in whole GiB (docs/gpu-runs).
			if mps.DisplayMemLimit(lim.MemoryLimit) != mps.DisplayMemLimit(units.MiB(d.MPSMemoryLimit)) {
				return fmt.Errorf("device %s offered with cap %d MiB but MPS holds %d", d.Addr, d.MPSMemoryLimit, lim.MemoryLimit)
			}
			if int(lim.ThreadPercentage) != d.MPSThreadPercentage {
				return fmt.Errorf("device %s offered with %d%% but MPS holds %.1f", d.Addr, d.MPSThreadPercentage, lim.ThreadPercentage)
			}
			checked++
		}
		return nil
	}
	if err := h.agent.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if checked != 6 {
		t.Fatalf("checked %d devices at sync time, want 6", checked)
	}
	devs := h.devices()
	if len(devs) != 6 {
		t.Fatalf("%d devices in the inventory, want 6", len(devs))
	}
	if devs[0].Addr != "1a:00.0-0" || devs[0].MPSMemoryLimit != int(h200Memory/4) || devs[0].MPSThreadPercentage != 25 || devs[4].Addr != "db:00.0-0" || devs[4].MPSMemoryLimit != int(h200Memory/2) {
		t.Errorf("devices not as planned: %+v", devs)
	}
	if !h.agent.Status().Ready {
		t.Error("agent not ready after a full reconcile")
	}
	if want := "yunion.io/mps-gpu=" + twoGPUs()[0].UUID.String() + "::0"; devs[0].CDIName != want {
		t.Errorf("cdi_name %q, want %q", devs[0].CDIName, want)
	}
	// The host's CDI spec holds every device under both names.
	spec, err := os.ReadFile(filepath.Join(h.dir, "cdi", "yunion.io-mps-gpu.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if !strings.Contains(string(spec), "name: "+d.ID) || !strings.Contains(string(spec), d.DevicePath+"::") {
			t.Errorf("CDI spec lacks device %s (%s)", d.ID, d.Addr)
		}
	}
}

func TestComputeModeIsSetOnceAndTheOriginalRemembered(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	h.backend.gpus[1].ComputeMode = gpu.ComputeModeProhibited
	for range 2 {
		if err := h.agent.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if len(h.backend.setModes) != 2 {
		t.Fatalf("compute mode set %v; want each GPU once", h.backend.setModes)
	}
	modes, err := gpu.NewModes(h.cfg.Host.StateDirectory).Previous()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{twoGPUs()[0].UUID.String(): "Default", twoGPUs()[1].UUID.String(): "Prohibited"}
	if fmt.Sprint(modes) != fmt.Sprint(want) {
		t.Errorf("remembered %v, want %v", modes, want)
	}
}

func TestComputeModeLeftAloneWhenConfigured(t *testing.T) {
	h := newHarness(t, "mps_set_exclusive_compute_mode: false\n", fourAndTwo)
	h.backend.setErr = errors.New("must not be called")
	if err := h.agent.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(h.cfg.Host.StateDirectory, gpu.ModeFile)); !os.IsNotExist(err) {
		t.Errorf("nothing to remember, but %s exists", gpu.ModeFile)
	}
}

// failingRunner is the simulated control with one GPU's daemon unable to start.
type failingRunner struct {
	*mpssim.Runner
	badPipe string
}

func (f failingRunner) Start(ctx context.Context, env mps.Env) error {
	if env.PipeDir == f.badPipe {
		return errors.New("nvidia-cuda-mps-control: cannot start")
	}
	return f.Runner.Start(ctx, env)
}

func TestAGPUWhoseMPSFailsIsMarkedUnhealthyAndTheOthersAreOffered(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	h.agent.opts.Runner = failingRunner{Runner: h.runner, badPipe: h.pipeDir(1)}
	err := h.agent.Reconcile(context.Background())
	if err == nil || !strings.Contains(err.Error(), twoGPUs()[1].UUID.String()) {
		t.Fatalf("want an error naming the failed GPU, got %v", err)
	}
	devs := h.devices()
	if len(devs) != 6 {
		t.Fatalf("%d devices, want all 6: a failing GPU's devices stay, marked unhealthy", len(devs))
	}
	for _, d := range devs {
		if bad := d.DevicePath == twoGPUs()[1].UUID.String(); d.Unhealthy != bad {
			t.Errorf("device %s of GPU %s: unhealthy=%v", d.Addr, d.DevicePath, d.Unhealthy)
		}
	}
	st := h.agent.Status()
	if st.Ready || st.GPUs[1].Enforced || !st.GPUs[0].Enforced || st.GPUs[1].Error == "" || st.GPUs[1].Healthy {
		t.Errorf("status should show GPU 1 failed and not ready: %+v", st)
	}
	// The daemon can start again: the devices come back by themselves.
	h.agent.opts.Runner = h.runner
	h.agent.mps.gpus = map[gpu.UUID]*gpuState{}
	if err := h.agent.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, d := range h.devices() {
		if d.Unhealthy {
			t.Errorf("device %s still unhealthy after recovery", d.Addr)
		}
	}
}

func TestInvalidPlanChangesNothing(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	if err := h.agent.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := h.devices()
	// The second GPU disappears (pulled, or fell off the bus): the entry
	// naming it no longer resolves. Nothing may be torn down for that.
	h.backend.gpus = h.backend.gpus[:1]
	err := h.agent.Reconcile(context.Background())
	if err == nil || !strings.Contains(err.Error(), "devices.yml:5") {
		t.Fatalf("want an error naming devices.yml:5, got %v", err)
	}
	if after := h.devices(); len(after) != len(before) {
		t.Errorf("an invalid plan removed devices: %d -> %d", len(before), len(after))
	}
	if h.agent.Status().Ready {
		t.Error("ready despite an invalid configuration")
	}
}

func TestMPSKeepsWorkingWhileTheInventoryIsAway(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	h.inv.fail = errors.New("connection refused")
	if err := h.agent.Reconcile(context.Background()); err == nil {
		t.Fatal("reconcile should report the inventory failure")
	}
	for i := range 2 {
		if lim, err := h.controlDefaults(i); err != nil || lim.MemoryLimit == 0 {
			t.Errorf("GPU %d: MPS should be up with caps during an inventory outage: %+v %v", i, lim, err)
		}
	}
	h.inv.fail = nil
	if err := h.agent.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(h.devices()); n != 6 {
		t.Errorf("%d devices after the inventory came back, want 6", n)
	}
}

func TestReplicasWhenNoEntryNamesAGPU(t *testing.T) {
	h := newHarness(t, "cuda_mps_replicas: 3\n", "")
	if err := h.agent.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	devs := h.devices()
	if len(devs) != 6 || devs[0].MPSThreadPercentage != 33 || devs[0].MPSMemoryLimit != int(h200Memory/3) {
		t.Errorf("want 3 devices per GPU at 33%% and total/3: %+v", devs)
	}
}

func TestHealthEndpoints(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	srv := httptest.NewServer(h.agent.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before the first reconcile: %d, want 503", code)
	}
	if err := h.agent.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after reconcile: %d", code)
	}
	code, body := get("/status")
	var st status.Status
	if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil || st.VirtualDevices != 6 || len(st.GPUs) != 2 || st.GPUs[0].MemoryLimit != h200Memory/4 {
		t.Errorf("/status: %d %s", code, body)
	}
	if _, body := get("/metrics"); !strings.Contains(body, `mps_daemon_virtual_devices{Hostname="node-1"} 6`) || !strings.Contains(body, `mps_daemon_reconciles_total{Hostname="node-1",result="ok"} 1`) {
		t.Errorf("/metrics lacks the reconcile figures:\n%s", body)
	}
}
