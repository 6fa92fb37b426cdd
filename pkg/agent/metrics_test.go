package agent

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"yunion.io/x/mps-daemon/pkg/metrics"
)

// A failed reconcile is counted under what failed it, so an operator can
// tell a bad edit from a sick GPU from an inventory outage.
func TestReconcileErrorsByKind(t *testing.T) {
	tests := []struct {
		kind   metrics.ErrorKind
		break_ func(h *harness)
	}{
		{metrics.ErrorInventory, func(h *harness) { h.inv.fail = errors.New("connection refused") }},
		{metrics.ErrorConfig, func(h *harness) { h.backend.gpus = h.backend.gpus[:1] }}, // the YAML names a GPU that is gone
		{metrics.ErrorMPS, func(h *harness) { h.agent.opts.Runner = failingRunner{Runner: h.runner, badPipe: h.pipeDir(1)} }},
		{metrics.ErrorGPU, func(h *harness) { h.backend.setErr = errors.New("NVML: insufficient permissions") }},
	}
	for _, tt := range tests {
		t.Run(string(tt.kind), func(t *testing.T) {
			h := newHarness(t, "", fourAndTwo)
			tt.break_(h)
			if err := h.agent.Reconcile(context.Background()); err == nil {
				t.Fatal("the reconcile should fail")
			}
			for _, k := range metrics.ErrorKinds() {
				want := 0.0
				if k == tt.kind {
					want = 1
				}
				if got := errorsOfKind(t, h, k); got != want {
					t.Errorf("reconcile errors of kind %s: %v, want %v", k, got, want)
				}
			}
		})
	}
}

func errorsOfKind(t *testing.T, h *harness, kind metrics.ErrorKind) float64 {
	t.Helper()
	mfs, err := h.agent.met.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "mps_daemon_reconcile_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == string(kind) {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series for kind %s", kind)
	return 0
}

// /metrics is read from the status at scrape time: after a resize the
// removed devices are gone from the next scrape, with nothing deleted.
func TestMetricsFollowAResize(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	srv := httptest.NewServer(h.agent.Handler())
	defer srv.Close()
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(h.agent.met.reg, "mps_virtual_device_memory_limit_bytes"); err != nil || n != 6 {
		t.Fatalf("%d device cap series (%v), want 4+2", n, err)
	}
	body := scrapeAgent(t, srv.URL)
	gpu0 := `Hostname="node-1",UUID="` + twoGPUs()[0].UUID.String() + `",device="nvidia0",gpu="0",pci_bus_id="00000000:1A:00.0"`
	for _, want := range []string{
		`mps_gpu_virtual_devices{` + gpu0 + `} 4`,
		`mps_gpu_healthy{` + gpu0 + `} 1`,
		// h200Memory / 4 = 35942 MiB
		`mps_virtual_device_memory_limit_bytes{Hostname="node-1",UUID="` + twoGPUs()[0].UUID.String() + `",addr="1a:00.0-3",device="nvidia0",gpu="0",pci_bus_id="00000000:1A:00.0",virtual_device="` + twoGPUs()[0].UUID.String() + `::3"} 3.7687918592e+10`,
		`mps_daemon_ready{Hostname="node-1"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	h.cfg.Devices = mustDevices(t, h.dir, yamlFor(2, 2))
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(h.agent.met.reg, "mps_virtual_device_memory_limit_bytes", "mps_virtual_device_attached"); err != nil || n != 2*4 {
		t.Errorf("%d device series after 4 -> 2 (%v), want 2 series for each of 2+2 devices", n, err)
	}
	body = scrapeAgent(t, srv.URL)
	if strings.Contains(body, `addr="1a:00.0-3"`) || strings.Contains(body, `addr="1a:00.0-2"`) {
		t.Error("a device removed by the resize still has series")
	}
	if !strings.Contains(body, `mps_gpu_virtual_devices{`+gpu0+`} 2`) {
		t.Error("GPU 0 should show N = 2 after the resize")
	}
}

func scrapeAgent(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}
