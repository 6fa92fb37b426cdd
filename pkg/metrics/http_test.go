package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestHTTPCountsByRouteMethodAndCode(t *testing.T) {
	h := NewHTTP(InventoryPrefix)
	h.Observe("/isolated_devices/{id}", "GET", 200, 3*time.Millisecond)
	h.Observe("/isolated_devices/{id}", "GET", 200, 7*time.Millisecond)
	h.Observe("/isolated_devices/{id}", "GET", 404, time.Millisecond)
	h.Observe("/hosts", "PROPFIND", 404, time.Millisecond)

	tests := []struct {
		route, method, code string
		want                float64
	}{
		{"/isolated_devices/{id}", "GET", "200", 2},
		{"/isolated_devices/{id}", "GET", "404", 1},
		{"/hosts", "OTHER", "404", 1},
		{"/hosts", "GET", "200", 0},
	}
	for _, tt := range tests {
		t.Run(tt.route+" "+tt.method+" "+tt.code, func(t *testing.T) {
			if got := testutil.ToFloat64(h.requests.WithLabelValues(tt.route, tt.method, tt.code)); got != tt.want {
				t.Errorf("requests = %v, want %v", got, tt.want)
			}
		})
	}
	if n := testutil.CollectAndCount(h, "mps_inventory_http_request_duration_seconds"); n != 3 {
		t.Errorf("%d latency series, want 3 (one per route, method and code)", n)
	}
}

func TestHTTPInFlight(t *testing.T) {
	h := NewHTTP(InventoryPrefix)
	done1, done2 := h.Start(), h.Start()
	if got := testutil.ToFloat64(h.inFlight); got != 2 {
		t.Errorf("in flight %v, want 2", got)
	}
	done1()
	done2()
	if got := testutil.ToFloat64(h.inFlight); got != 0 {
		t.Errorf("in flight %v after both ended, want 0", got)
	}
}

func TestMethodLabelIsBounded(t *testing.T) {
	for in, want := range map[string]string{"GET": "GET", "DELETE": "DELETE", "get": "OTHER", "BREW": "OTHER", "": "OTHER"} {
		if got := Method(in); got != want {
			t.Errorf("Method(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHTTPLintAndPromtool(t *testing.T) {
	h := NewHTTP(InventoryPrefix)
	h.Observe("/hosts", "GET", 200, time.Millisecond)
	problems, err := testutil.CollectAndLint(h)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	checkMetricsWithPromtool(t, scrape(t, NewRegistry(h)))
}
