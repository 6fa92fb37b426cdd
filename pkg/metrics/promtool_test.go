package metrics

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// promtool finds Prometheus' promtool on PATH. Without it the test is
// skipped, unless MPS_REQUIRE_PROMTOOL=1 (CI, which installs it): then the
// test fails, so a check can never silently stop running.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("MPS_REQUIRE_PROMTOOL") == "1" {
			t.Fatalf("promtool not on PATH and MPS_REQUIRE_PROMTOOL=1: %v", err)
		}
		t.Skip("promtool not on PATH (Debian: the prometheus package); set MPS_REQUIRE_PROMTOOL=1 to fail instead")
	}
	return path
}

// runPromtool runs promtool with args and stdin and returns what it printed.
func runPromtool(t *testing.T, stdin []byte, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool(t), args...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// checkMetricsWithPromtool runs `promtool check metrics` on an exposition;
// any problem it names fails the test.
func checkMetricsWithPromtool(t *testing.T, exposition []byte) {
	t.Helper()
	out, err := runPromtool(t, exposition, "check", "metrics")
	if err != nil || len(bytes.TrimSpace([]byte(out))) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// scrape serves reg as /metrics does and returns what a scrape gets.
func scrape(t *testing.T, reg *prometheus.Registry) []byte {
	t.Helper()
	srv := httptest.NewServer(Handler(reg))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %v\n%s", resp.StatusCode, err, b)
	}
	return b
}
