package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// What an operator's Prometheus and shell see of a running host: the
// daemon's and the inventory's /metrics (promtool accepts both), and
// `mps-daemon status` read from the running daemon.
func TestMetricsAndStatusOfARunningHost(t *testing.T) {
	_, url := startInventory(t, "127.0.0.1:0")
	daemonAddr := freePort(t)
	e := newEnv(t, url, daemonAddr)
	d := startDaemon(t, e)
	eventually(t, "ready", func() (bool, string) {
		code, body := get("http://" + daemonAddr + "/readyz")
		return code == http.StatusOK, body + d.Output()
	})

	code, daemonMetrics := get("http://" + daemonAddr + "/metrics")
	if code != http.StatusOK {
		t.Fatalf("daemon /metrics: %d %s", code, daemonMetrics)
	}
	if n := strings.Count(daemonMetrics, "\nmps_virtual_device_memory_limit_bytes{"); n != 10 {
		t.Errorf("%d device cap series, want one per virtual device (10)", n)
	}
	for _, want := range []string{
		`mps_daemon_ready{Hostname="e2e-host"} 1`,
		`mps_daemon_info{Hostname="e2e-host",`,
		`simulated="true"`,
		`mps_gpu_info{Hostname="e2e-host",UUID="GPU-`,
		`model_name="NVIDIA H100 80GB HBM3",pci_bus_id="00000000:18:00.0"} 1`,
	} {
		if !strings.Contains(daemonMetrics, want) {
			t.Errorf("daemon /metrics lacks %s", want)
		}
	}
	promtoolCheckMetrics(t, "daemon", []byte(daemonMetrics))

	// The inventory's /metrics wants a token; Prometheus gets a viewer's.
	if code, _ := get(url + "/metrics"); code != http.StatusUnauthorized {
		t.Errorf("inventory /metrics without a token: %d, want 401", code)
	}
	viewer, errOut, rc := run(t, nil, "mps-inventory", "token", "create", "--role", "viewer", "--name", "prometheus", "--db", filesFor(t, url).db)
	if rc != 0 {
		t.Fatalf("token create: %s", errOut)
	}
	code, invMetrics := getWithToken(t, url+"/metrics", strings.TrimSpace(viewer))
	if code != http.StatusOK || !strings.Contains(invMetrics, `mps_inventory_http_requests_total{code="200",method="GET",route="/isolated_devices"}`) {
		t.Errorf("inventory /metrics: %d, want the daemon's syncs counted by route:\n%s", code, invMetrics)
	}
	promtoolCheckMetrics(t, "inventory", []byte(invMetrics))

	// mps-daemon status finds the daemon through host.conf.
	out, errOut, rc := run(t, nil, "mps-daemon", "status", "--config", e.hostConf)
	if rc != 0 {
		t.Fatalf("mps-daemon status: exit %d: %s", rc, errOut)
	}
	for _, want := range []string{"mps-daemon on e2e-host  [SIMULATED GPUs and MPS]", "0000:18:00.0", "NVIDIA H100 80GB HBM3", "3a:00.0-2", "Exclusive_Process"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "  free\n"); n != 10 {
		t.Errorf("%d free devices in the status, want 10:\n%s", n, out)
	}

	// Nothing listening: one line on stderr, exit 1.
	nobody := freePort(t)
	out, errOut, rc = run(t, nil, "mps-daemon", "status", "--address", nobody)
	if rc != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, nobody) {
		t.Errorf("status of no daemon: exit %d, stdout %q, stderr %q; want exit 1 and one line naming %s", rc, out, errOut, nobody)
	}
}

func getWithToken(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// promtoolCheckMetrics runs `promtool check metrics` on a scrape; without
// promtool on PATH it is skipped, unless MPS_REQUIRE_PROMTOOL=1 (CI).
func promtoolCheckMetrics(t *testing.T, what string, exposition []byte) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("MPS_REQUIRE_PROMTOOL") == "1" {
			t.Fatalf("promtool not on PATH and MPS_REQUIRE_PROMTOOL=1: %v", err)
		}
		t.Logf("promtool not on PATH: %s /metrics not checked with it", what)
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics on the %s's /metrics: %v\n%s", what, err, out)
	}
}
