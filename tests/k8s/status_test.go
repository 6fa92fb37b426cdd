package k8s

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Issue 40: prepared claims showed in neither /status, `mps-daemon status`
// nor /metrics. Two claims of any size prepared through the kubelet's
// gRPC show at once (the plugin tells the agent, which reconciles): each
// with its size, its GPU and its device, in /status, in the status command
// and as mps_claim_* series; one unprepared is gone from all three.
func TestPreparedClaimsShowInStatusAndMetrics(t *testing.T) {
	api, h, d := newNode(t)
	waitPool(t, api, "GPU 0's claims device and GPU 1's two slices", func(p poolView) bool { return len(p) == 3 }, d)
	addr := d.listenAddress(t)
	k := register(t, h.registrarDir, driverName)
	a := allocate(t, api, mustCreate(t, api, sizedClaim(t, "trainer", "40Gi", "")))
	b := allocate(t, api, mustCreate(t, api, sizedClaim(t, "notebook", "20Gi", "30")))
	if _, perr := k.prepare(a); perr != "" {
		t.Fatal(perr)
	}
	if _, perr := k.prepare(b); perr != "" {
		t.Fatal(perr)
	}
	eventually(t, "both claims in /status", func() (bool, string) {
		st, err := statusOf(addr)
		return err == nil && len(st.Claims) == 2, fmt.Sprintf("%+v %v", st.Claims, err)
	})
	st, _ := statusOf(addr)
	want := map[string]struct {
		bytes   int64
		threads int
	}{"default/trainer": {40 << 30, 100}, "default/notebook": {20 << 30, 30}}
	for _, c := range st.Claims {
		w, ok := want[c.Claim]
		if !ok || c.CapBytes != w.bytes || c.ThreadPercentage != w.threads || !strings.HasPrefix(c.Name, c.GPU+"::100") || c.UID == "" {
			t.Errorf("/status claim %+v, want %+v", c, w)
		}
	}
	metrics := scrape(t, addr)
	for name, w := range want {
		line := fmt.Sprintf(`claim="%s"`, name)
		if !strings.Contains(metrics, "mps_claim_memory_limit_bytes{") || !containsLine(metrics, "mps_claim_memory_limit_bytes{", line, fmt.Sprintf("} %g", float64(w.bytes))) {
			t.Errorf("no mps_claim_memory_limit_bytes of %s at %d bytes:\n%s", name, w.bytes, grepLines(metrics, "mps_claim"))
		}
	}
	if !strings.Contains(metrics, "mps_daemon_claims{") || !containsLine(metrics, "mps_daemon_claims{", "", "} 2") {
		t.Errorf("mps_daemon_claims is not 2:\n%s", grepLines(metrics, "mps_daemon_claims"))
	}
	out, err := runStatus(addr)
	if err != nil || !strings.Contains(out, "default/trainer") || !strings.Contains(out, "40960") {
		t.Errorf("mps-daemon status: %v\n%s", err, out)
	}

	k.unprepare(b)
	eventually(t, "the unprepared claim gone from /status", func() (bool, string) {
		st, err := statusOf(addr)
		return err == nil && len(st.Claims) == 1 && st.Claims[0].Claim == "default/trainer", fmt.Sprintf("%+v %v", st.Claims, err)
	})
	if m := scrape(t, addr); strings.Contains(m, `claim="default/notebook"`) {
		t.Errorf("the unprepared claim's series remain:\n%s", grepLines(m, "mps_claim"))
	}
}

// scrape is the daemon's /metrics.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// containsLine reports a line of text that begins with prefix and holds
// every one of parts.
func containsLine(text, prefix string, parts ...string) bool {
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, prefix) {
			continue
		}
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			return true
		}
	}
	return false
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
