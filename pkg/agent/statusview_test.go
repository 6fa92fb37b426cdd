package agent

import (
	"bytes"
	"context"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/statusview"
)

// The summary is read from the running daemon's /status, as
// `mps-daemon status` does, not recomputed.
func TestStatusIsReadFromTheRunningDaemon(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	if err := h.agent.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h.agent.Handler())
	defer srv.Close()
	st, err := statusview.Fetch(context.Background(), strings.TrimPrefix(srv.URL, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := statusview.Write(&b, st, time.Now()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !regexp.MustCompile(`ready:\s+yes\n`).MatchString(out) {
		t.Errorf("status should say ready:\n%s", out)
	}
	for _, want := range []string{"mps-daemon on node-1", "0000:1a:00.0", "35942 MiB", "db:00.0-1", twoGPUs()[1].UUID.String() + "::1"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "  free"); n != 6 {
		t.Errorf("%d free devices shown, want 6:\n%s", n, out)
	}
}
