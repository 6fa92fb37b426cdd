package server

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// A storm of refused attaches (no free device: an answer a client
// expects) writes no warning and a bounded number of lines at info;
// refused credentials stay warnings (issue 34: 577,000 warn lines).
func TestRefusedAttachStormWritesABoundedLog(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		devs := seedGPUs(t, e.st, "gpu-1", 1, 1)
		e.mustCall("POST", "/servers/pod-a/attach-isolated-device", `{"server":{"device":"`+devs[0].ID+`"}}`, nil)
		const storm = 300
		start := time.Now()
		for range storm {
			status, body := e.call("POST", "/servers/pod-b/attach-isolated-device",
				`{"server":{"model":"NVIDIA H100 80GB HBM3","count":1,"sharing_mode":"EXCLUSIVE"}}`)
			if status/100 != 4 {
				t.Fatalf("attach with no free device: %d %s, want a 4xx refusal", status, body)
			}
		}
		windows := int(time.Since(start)/clientErrorWindow) + 1
		log := e.log.String()
		var warn, info int
		for _, l := range strings.Split(log, "\n") {
			switch {
			case strings.Contains(l, "level=WARN"), strings.Contains(l, "level=ERROR"):
				warn++
			case strings.Contains(l, "level=INFO"):
				info++
			}
		}
		if warn != 0 || info > 2*windows {
			t.Errorf("%d refused attaches wrote %d lines at warn or error and %d at info (want 0 and at most %d)", storm, warn, info, 2*windows)
		}
		if !strings.Contains(log, `msg="client error answered`) {
			t.Errorf("the refusals are not in the log at all:\n%.2000s", log)
		}

		// A refused credential is still a warning.
		status, _, _ := e.callFull("GET", "/isolated_devices", "", "Authorization", "Bearer not-a-token")
		if status != http.StatusUnauthorized || !strings.Contains(e.log.String(), "level=WARN msg=request method=GET path=/isolated_devices status=401") {
			t.Errorf("a refused token: %d, not logged at warn:\n%s", status, e.log.String())
		}
	})
}

// The summary: the first client error of a window at once, the others of
// the window in one line written by the first after it.
func TestClientErrorSummary(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var c clientErrors
	ctx := context.Background()
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	c.add(ctx, log, "POST /servers/{id}/attach-isolated-device", 400, t0)
	for i := range 5 {
		c.add(ctx, log, "POST /servers/{id}/attach-isolated-device", 400, t0.Add(time.Duration(i)*time.Second))
	}
	c.add(ctx, log, "GET /isolated_devices/{id}", 404, t0.Add(30*time.Second))
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d lines within the window, want the first alone:\n%s", n, buf.String())
	}
	c.add(ctx, log, "GET /isolated_devices/{id}", 404, t0.Add(clientErrorWindow))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], `msg="client errors answered" requests=6`) ||
		!strings.Contains(lines[1], `by_route="GET /isolated_devices/{id} 404: 1, POST /servers/{id}/attach-isolated-device 400: 5"`) {
		t.Fatalf("after the window:\n%s", buf.String())
	}
}
