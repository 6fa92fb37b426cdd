package metrics

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"yunion.io/x/mps-daemon/internal/testsupport/golden"
	"yunion.io/x/mps-daemon/pkg/clientreport"
	"yunion.io/x/mps-daemon/pkg/pci"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/units"
)

const (
	uuid0 = "GPU-5d4c3b2a-1f0e-4d3c-9b8a-7f6e5d4c3b2a"
	uuid1 = "GPU-0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
)

// hostStatus is a host with two H100s: GPU 0 split in two with mps_qos
// (device 0 latency, held and measured; device 1 batch, free), GPU 1 whole,
// its server in FAULT.
func hostStatus() status.Status {
	const h100 units.Bytes = 85520809984
	return status.Status{
		Ready: true, InventoryReachable: true, ConfigGeneration: 3, ConfigError: "dev.yml:3: rejected",
		LastReconcile:  time.Date(2026, 11, 22, 2, 41, 4, 0, time.UTC),
		VirtualDevices: 3, Retiring: []string{"GPU-retiring"}, ConfigHeld: &status.Held{}, RestartPending: []string{"mps_listen_address", "mps_host_name"},
		Accounting: &status.Accounting{Policy: "enforce", Clients: map[string]int{"identity": 2, "unknown": 1},
			Mismatches: []clientreport.Mismatch{{PID: 1}}, QoSEscapes: []clientreport.Escape{{PID: 2}}, WithoutView: []clientreport.WithoutView{{PID: 3}},
			NewClients: &status.NewClients{Logs: []status.ClientLog{{Path: "/tmp/nvidia-mps/log/" + uuid0 + "/control.log", Following: true,
				ForeignCommands: map[string]uint64{"daemon": 2, "server": 1}},
				{Path: "/tmp/nvidia-mps/log/" + uuid1 + "/control.log", Error: "cannot watch"}},
				PollIntervalSeconds: 0.1, PolledGPUs: []string{uuid1}, Checked: 7, Exited: 2, Reused: 1}},
		View: &status.View{Library: "/usr/lib/yunion-mps/libyunion-mps-view.so", State: status.ViewOn, Devices: 3},
		GPUs: []status.GPU{
			{
				Index: 0, UUID: uuid0, Model: "NVIDIA H100 80GB HBM3", PCI: pci.Address{Bus: 0x1a},
				MemoryTotal: h100, MemoryUsed: 4 << 30, ComputeMode: "Exclusive_Process",
				ControlDaemonUp: true, Servers: []status.Server{{Status: "ACTIVE", Clients: 2}}, VirtualNumber: 2,
				Enforced: true, Healthy: true, ClientPriority: 1,
			},
			{
				Index: 1, UUID: uuid1, Model: "NVIDIA H100 80GB HBM3", PCI: pci.Address{Bus: 0xdb},
				MemoryTotal: h100, ComputeMode: "Exclusive_Process",
				ControlDaemonUp: true, Servers: []status.Server{{Status: "FAULT", Clients: 1}}, VirtualNumber: 1,
				Enforced: true, Healthy: false, PrivilegedSocketReachable: true,
			},
		},
		Devices: []status.Device{
			{
				Name: uuid0 + "::0", GPU: uuid0, Addr: "1a:00.0-0", ID: "0b5e5b4e-5d5c-4d6a-9b1a-0c1d2e3f4a5b",
				MemoryLimit: (h100.MiB() / 2).Bytes(), ThreadPercentage: 100, Measured: true, UsedBytes: 3 << 30, Clients: 2, WithoutView: 1,
				Guest: "guest-7", Healthy: true,
			},
			{
				Name: uuid0 + "::1", GPU: uuid0, Addr: "1a:00.0-1", ID: "1c6f6c5f-6e6d-4e7b-8c2b-1d2e3f4a5b6c",
				MemoryLimit: (h100.MiB() / 2).Bytes(), ThreadPercentage: 92, ClientPriority: 1, Healthy: true,
			},
			{
				Name: uuid1 + "::0", GPU: uuid1, Addr: "db:00.0-0", ID: "2d7a7d6a-7f7e-4f8c-9d3c-2e3f4a5b6c7d",
				MemoryLimit: h100.MiB().Bytes(), ThreadPercentage: 100, Measured: true, UsedBytes: 90000 << 20, Clients: 1, OverCap: true,
				Guest: "guest-9", Healthy: false, PendingRemoval: true,
			},
		},
		Pods: []status.Pod{{Name: uuid0 + "::pod/6a2d3e86-33c5-4b4f-8bbf-7a1e2c3d4e5f", Server: "6a2d3e86-33c5-4b4f-8bbf-7a1e2c3d4e5f",
			ServerName: "gpu-pod-1", GPU: uuid0, Slices: 1, MemoryLimit: (h100.MiB() / 2).Bytes(), UsedBytes: 50000 << 20, Clients: 2, OverCap: true}},
		Claims: []status.Claim{
			{
				Device: status.Device{Name: uuid0 + "::1000", GPU: uuid0, GPUIndex: 0, MemoryLimit: 20 << 30, ThreadPercentage: 30,
					Measured: true, UsedBytes: 12 << 30, Clients: 2, Healthy: true, CDIName: "yunion.io/mps-claim=" + uuid0 + "::1000"},
				Claim: "default/trainer", UID: "5a1e0000-0000-4000-8000-000000000001", Escapes: 1,
			},
			{
				Device: status.Device{Name: uuid0 + "::1001", GPU: uuid0, GPUIndex: 0, MemoryLimit: 10 << 30, ThreadPercentage: 100,
					Healthy: true, CDIName: "yunion.io/mps-claim=" + uuid0 + "::1001"},
				Claim: "ml/notebook", UID: "5a1e0000-0000-4000-8000-000000000002",
			},
		},
	}
}

// swappable is a status source a test changes between scrapes.
type swappable struct {
	mu sync.Mutex
	s  status.Status
}

func (w *swappable) get() status.Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.s
}

func (w *swappable) set(s status.Status) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.s = s
}

func newTestDaemon(s status.Status) (*Daemon, *swappable) {
	w := &swappable{s: s}
	return NewDaemon(DaemonOptions{Hostname: "node-1", Status: w.get, EnforcementSteps: []string{"terminate_client", "sigkill"},
		EnforcementCauses: []string{"memory_cap", "qos_escape"}, AccountingSources: []string{"identity", "ancestor", "environ", "unknown"}}), w
}

// describedNames are the metric names a collector describes.
func describedNames(c prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc, 100)
	go func() { c.Describe(ch); close(ch) }()
	var names []string
	for d := range ch {
		s := d.String()
		const key = `fqName: "`
		i := strings.Index(s, key)
		if i < 0 {
			continue
		}
		s = s[i+len(key):]
		names = append(names, s[:strings.IndexByte(s, '"')])
	}
	slices.Sort(names)
	return names
}

// TestDaemonExposition is the whole exposition of a known host, checked
// against testdata/daemon.prom (go test -update rewrites it). Only
// mps_daemon_info is left out: it carries the Go version.
func TestDaemonExposition(t *testing.T) {
	d, _ := newTestDaemon(hostStatus())
	d.ObserveReconcile(120*time.Millisecond, "")
	d.ObserveReconcile(30*time.Millisecond, ErrorInventory)
	d.ObserveReconcile(10*time.Millisecond, ErrorInventory)
	d.ObserveReconcile(5*time.Millisecond, ErrorConfig)
	d.ObserveReload(true)
	d.ObserveReload(false)
	d.ObserveControlDaemonRestart()
	d.ObserveEnforcementStep("terminate_client", "memory_cap")
	d.ObserveEnforcementStep("terminate_client", "qos_escape")
	d.ObserveEscape("qos_escape", "connect", 3*time.Millisecond)
	d.ObserveEscape("memory_cap", "poll", 80*time.Millisecond)

	names := slices.DeleteFunc(describedNames(d), func(n string) bool { return n == "mps_daemon_info" })
	out, err := testutil.CollectAndFormat(d, expfmt.TypeTextPlain, names...)
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "daemon.prom", out)
}

func TestInfoSaysVersionAndSimulation(t *testing.T) {
	s := hostStatus()
	s.Simulated = true
	d, _ := newTestDaemon(s)
	got := labelsOf(t, gather(t, d), "mps_daemon_info")
	if len(got) != 1 || got[0]["simulated"] != "true" || got[0]["version"] == "" || !strings.HasPrefix(got[0]["go_version"], "go") || got[0][LabelHostname] != "node-1" {
		t.Errorf("mps_daemon_info labels %v", got)
	}
}

// A device removed between two scrapes (a resize) is absent from the
// second: no stale series, nothing to delete.
func TestRemovedDeviceLeavesNoSeries(t *testing.T) {
	d, src := newTestDaemon(hostStatus())
	deviceSeries := []string{
		"mps_virtual_device_memory_limit_bytes", "mps_virtual_device_thread_limit_ratio", "mps_virtual_device_attached",
		"mps_virtual_device_healthy", "mps_virtual_device_pending_removal", "mps_virtual_device_info",
	}
	if n := testutil.CollectAndCount(d, deviceSeries...); n != 3*len(deviceSeries) {
		t.Fatalf("%d device series before the resize, want %d", n, 3*len(deviceSeries))
	}
	s := hostStatus()
	s.Devices = s.Devices[:1] // 1a:00.0-1 and db:00.0-0 removed
	s.GPUs = s.GPUs[:1]       // and GPU 1 taken out of the configuration
	src.set(s)
	if n := testutil.CollectAndCount(d, deviceSeries...); n != len(deviceSeries) {
		t.Errorf("%d device series after the resize, want %d", n, len(deviceSeries))
	}
	for _, mf := range gather(t, d) {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == uuid1 || l.GetValue() == "1a:00.0-1" || l.GetValue() == uuid0+"::1" {
					t.Errorf("%s still has a series of a removed device or GPU: %v", mf.GetName(), m.GetLabel())
				}
			}
		}
	}
}

// The GPU labels are spelled as dcgm-exporter spells them, with its values,
// so that DCGM_FI_DEV_* series and ours join on UUID (or gpu + Hostname).
func TestGPULabelsAsDCGMExporterSpellsThem(t *testing.T) {
	d, _ := newTestDaemon(hostStatus())
	want := map[string]string{
		"gpu": "1", "UUID": uuid1, "device": "nvidia1", "pci_bus_id": "00000000:DB:00.0", "Hostname": "node-1",
	}
	families := gather(t, d)
	if info := labelsOf(t, families, "mps_gpu_info"); len(info) != 2 || info[1][LabelModelName] != "NVIDIA H100 80GB HBM3" {
		t.Errorf("mps_gpu_info: %v", info)
	}
	for _, name := range []string{"mps_gpu_info", "mps_gpu_memory_total_bytes", "mps_gpu_healthy", "mps_gpu_clients", "mps_virtual_device_memory_limit_bytes"} {
		t.Run(name, func(t *testing.T) {
			found := false
			for _, l := range labelsOf(t, families, name) {
				if l["UUID"] != uuid1 {
					continue
				}
				found = true
				for k, v := range want {
					if l[k] != v {
						t.Errorf("label %s=%q, want %q (all: %v)", k, l[k], v, l)
					}
				}
			}
			if !found {
				t.Errorf("no series of GPU %s", uuid1)
			}
		})
	}
}

func TestStateSeries(t *testing.T) {
	s := hostStatus()
	s.GPUs[1].Servers = append(s.GPUs[1].Servers, status.Server{Status: "SHUTDOWN"})
	s.Devices[1].Measured = false
	d, _ := newTestDaemon(s)
	families := gather(t, d)
	value := func(name string, match map[string]string) (float64, bool) {
		for _, mf := range families {
			if mf.GetName() != name {
				continue
			}
		next:
			for _, m := range mf.GetMetric() {
				l := labelMap(m)
				for k, v := range match {
					if l[k] != v {
						continue next
					}
				}
				return m.GetGauge().GetValue(), true
			}
		}
		return 0, false
	}
	tests := []struct {
		name   string
		metric string
		match  map[string]string
		want   float64
		absent bool
	}{
		{"FAULT server counted", "mps_gpu_servers", map[string]string{"UUID": uuid1, "state": "FAULT"}, 1, false},
		{"no ACTIVE server is 0, not absent", "mps_gpu_servers", map[string]string{"UUID": uuid1, "state": "ACTIVE"}, 0, false},
		{"a state MPS never printed before still gets a series", "mps_gpu_servers", map[string]string{"UUID": uuid1, "state": "SHUTDOWN"}, 1, false},
		{"current compute mode", "mps_gpu_compute_mode", map[string]string{"UUID": uuid0, "mode": "Exclusive_Process"}, 1, false},
		{"other compute modes are 0", "mps_gpu_compute_mode", map[string]string{"UUID": uuid0, "mode": "Default"}, 0, false},
		{"unmeasured device has no usage", "mps_virtual_device_memory_used_bytes", map[string]string{"addr": "1a:00.0-1"}, 0, true},
		{"unmeasured device has no client count", "mps_virtual_device_clients", map[string]string{"addr": "1a:00.0-1"}, 0, true},
		{"free device has no guest", "mps_virtual_device_guest_info", map[string]string{"addr": "1a:00.0-1"}, 0, true},
		{"held device names its guest", "mps_virtual_device_guest_info", map[string]string{"addr": "1a:00.0-0", "guest": "guest-7"}, 1, false},
		{"accounting policy in force", "mps_daemon_accounting_policy", map[string]string{"policy": "enforce"}, 1, false},
		{"rejected edit", "mps_daemon_config_last_reload_successful", nil, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := value(tt.metric, tt.match)
			if tt.absent {
				if ok {
					t.Errorf("%s%v present (%v), want absent", tt.metric, tt.match, got)
				}
				return
			}
			if !ok || got != tt.want {
				t.Errorf("%s%v = %v (present %v), want %v", tt.metric, tt.match, got, ok, tt.want)
			}
		})
	}
}

// A device whose GPU is not in the status (a retiring GPU) keeps its
// series with the labels it has.
func TestDeviceOfAnUnlistedGPU(t *testing.T) {
	s := hostStatus()
	s.GPUs = s.GPUs[:1]
	d, _ := newTestDaemon(s)
	for _, l := range labelsOf(t, gather(t, d), "mps_virtual_device_pending_removal") {
		if l["addr"] == "db:00.0-0" && (l["UUID"] != uuid1 || l["gpu"] != "" || l["virtual_device"] != uuid1+"::0") {
			t.Errorf("labels %v", l)
		}
	}
}

func TestNoHostnameLeavesTheLabelOut(t *testing.T) {
	d := NewDaemon(DaemonOptions{Status: hostStatus})
	for _, mf := range gather(t, d) {
		for _, m := range mf.GetMetric() {
			if _, ok := labelMap(m)[LabelHostname]; ok {
				t.Fatalf("%s has a Hostname label without a host name", mf.GetName())
			}
		}
	}
}

func TestCountersCountFromZero(t *testing.T) {
	d, _ := newTestDaemon(status.Status{})
	const want = `
# HELP mps_daemon_reconcile_errors_total Failed reconciles, by what failed: config (the configuration does not fit the GPUs), gpu (NVML), mps (a control daemon), inventory.
# TYPE mps_daemon_reconcile_errors_total counter
mps_daemon_reconcile_errors_total{Hostname="node-1",kind="config"} 0
mps_daemon_reconcile_errors_total{Hostname="node-1",kind="gpu"} 1
mps_daemon_reconcile_errors_total{Hostname="node-1",kind="inventory"} 0
mps_daemon_reconcile_errors_total{Hostname="node-1",kind="mps"} 2
# HELP mps_daemon_reconciles_total Reconciles run, by result (ok or error).
# TYPE mps_daemon_reconciles_total counter
mps_daemon_reconciles_total{Hostname="node-1",result="error"} 3
mps_daemon_reconciles_total{Hostname="node-1",result="ok"} 1
`
	d.ObserveReconcile(time.Millisecond, ErrorMPS)
	d.ObserveReconcile(time.Millisecond, ErrorGPU)
	d.ObserveReconcile(time.Millisecond, ErrorMPS)
	d.ObserveReconcile(time.Millisecond, "")
	if err := testutil.CollectAndCompare(d, strings.NewReader(want), "mps_daemon_reconcile_errors_total", "mps_daemon_reconciles_total"); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(d.controlRestarts); got != 0 {
		t.Errorf("control daemon restarts %v before any", got)
	}
	d.ObserveControlDaemonRestart()
	if got := testutil.ToFloat64(d.controlRestarts); got != 1 {
		t.Errorf("control daemon restarts %v, want 1", got)
	}
}

// promlint, as client_golang ships it: names, units, _total, help texts.
func TestDaemonLint(t *testing.T) {
	d, _ := newTestDaemon(hostStatus())
	d.ObserveReconcile(time.Second, ErrorGPU)
	problems, err := testutil.CollectAndLint(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// promtool check metrics on what a scrape of the daemon's registry returns
// (Go runtime and process series included).
func TestDaemonPromtool(t *testing.T) {
	d, _ := newTestDaemon(hostStatus())
	d.ObserveReconcile(time.Second, ErrorGPU)
	checkMetricsWithPromtool(t, scrape(t, NewRegistry(d)))
}

func gather(t *testing.T, c prometheus.Collector) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

func labelMap(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

func labelsOf(t *testing.T, mfs []*dto.MetricFamily, name string) []map[string]string {
	t.Helper()
	var out []map[string]string
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				out = append(out, labelMap(m))
			}
		}
	}
	if out == nil {
		t.Errorf("no series %s", name)
	}
	return out
}
