package server

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// The inventory counts requests by route pattern, never by path: two
// devices looked up are one series, an unknown path is "unmatched", and no
// id reaches a label. /metrics itself needs a token (any role).
func TestRequestMetricsByRoute(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		_, d := e.seed()
		viewer, _, err := e.st.CreateToken(t.Context(), store.NewToken{Name: "prometheus", Role: store.RoleViewer})
		if err != nil {
			t.Fatal(err)
		}
		if status, _ := e.call("GET", "/metrics", "", "Authorization", ""); status != http.StatusUnauthorized {
			t.Errorf("/metrics without a token: %d, want 401", status)
		}
		e.mustCall("GET", "/isolated_devices/"+d.ID, "", nil)
		const missing = "9f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
		e.call("GET", "/isolated_devices/"+missing, "")
		e.call("GET", "/isolated_devices/"+missing, "")
		e.call("GET", "/no/such/"+missing, "")
		e.call("BREW", "/hosts", "")
		e.call("GET", "/healthz", "", "Authorization", "")

		status, body := e.call("GET", "/metrics", "", "Authorization", "Bearer "+viewer)
		if status != http.StatusOK {
			t.Fatalf("/metrics with a viewer token: %d %s", status, body)
		}
		text := string(body)
		for _, want := range []string{
			`mps_inventory_http_requests_total{code="200",method="GET",route="/isolated_devices/{id}"} 1`,
			`mps_inventory_http_requests_total{code="404",method="GET",route="/isolated_devices/{id}"} 2`,
			`mps_inventory_http_requests_total{code="404",method="GET",route="unmatched"} 1`,
			`mps_inventory_http_requests_total{code="200",method="POST",route="/hosts"} 1`,
			`mps_inventory_http_requests_total{code="401",method="GET",route="/metrics"} 1`,
			`mps_inventory_http_requests_total{code="200",method="GET",route="/healthz"} 1`,
			`mps_inventory_http_request_duration_seconds_count{code="404",method="GET",route="/isolated_devices/{id}"} 2`,
			`mps_inventory_http_requests_in_flight 1`, // this scrape
			`process_resident_memory_bytes`,
		} {
			if !strings.Contains(text, want+"\n") && !strings.Contains(text, want+" ") {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		// A method no standard names is OTHER, whatever the client sent.
		if !strings.Contains(text, `method="OTHER"`) || strings.Contains(text, "BREW") {
			t.Errorf("the made-up method should be counted as OTHER")
		}
		for _, id := range []string{d.ID, missing, "/no/such"} {
			if strings.Contains(text, id) {
				t.Errorf("%q from a request path reached /metrics", id)
			}
		}
		checkWithPromtool(t, body)
	})
}

// checkWithPromtool runs `promtool check metrics` on a scrape. Without
// promtool on PATH the check is skipped, unless MPS_REQUIRE_PROMTOOL=1 (CI).
func checkWithPromtool(t *testing.T, exposition []byte) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("MPS_REQUIRE_PROMTOOL") == "1" {
			t.Fatalf("promtool not on PATH and MPS_REQUIRE_PROMTOOL=1: %v", err)
		}
		t.Skip("promtool not on PATH; set MPS_REQUIRE_PROMTOOL=1 to fail instead")
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
