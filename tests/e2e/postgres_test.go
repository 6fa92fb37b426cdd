package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/pgtest"
	"yunion.io/x/mps-daemon/pkg/api"
)

// Two mps-inventory processes started at once on one PostgreSQL database
// (how a cluster scales out): both migrate it and serve, and what one
// writes the other answers.
func TestTwoInventoriesShareOnePostgresDatabase(t *testing.T) {
	dsn := pgtest.DSN(t)
	type inv struct {
		p                   *proc
		addrFile, tokenFile string
		url, token          string
	}
	invs := make([]*inv, 2)
	for i := range invs {
		dir := t.TempDir()
		in := &inv{addrFile: filepath.Join(dir, "addr"), tokenFile: filepath.Join(dir, "auth", "admin.token")}
		in.p = start(t, "mps-inventory", "--listen", "127.0.0.1:0", "--db", dsn,
			"--admin-token-file", in.tokenFile, "--address-file", in.addrFile)
		invs[i] = in
	}
	for i, in := range invs {
		eventually(t, fmt.Sprintf("inventory %d serving", i), func() (bool, string) {
			addr, err := os.ReadFile(in.addrFile)
			// The output reaches this test through a pipe, so the
			// serving line may trail the address file.
			if err != nil || len(addr) == 0 || in.p.Exited() || !strings.Contains(in.p.Output(), "msg=serving") {
				return false, in.p.Output()
			}
			in.url = "http://" + string(addr)
			return true, ""
		})
		b, err := os.ReadFile(in.tokenFile)
		if err != nil {
			t.Fatalf("inventory %d wrote no admin token: %v\n%s", i, err, in.p.Output())
		}
		in.token = strings.TrimSpace(string(b))
		if !strings.Contains(in.p.Output(), "backend=postgres") {
			t.Errorf("inventory %d does not say it serves PostgreSQL:\n%s", i, in.p.Output())
		}
	}

	a, b := invs[0], invs[1]
	mpsctl := func(in *inv, args ...string) string {
		t.Helper()
		out, errOut, code := run(t, []string{"MPS_INVENTORY_URL=" + in.url, "MPS_INVENTORY_TOKEN=" + in.token}, "mpsctl", args...)
		if code != 0 {
			t.Fatalf("mpsctl %s against %s: exit %d: %s", strings.Join(args, " "), in.url, code, errOut)
		}
		return out
	}
	if out, errOut, code := run(t, nil, "mps-inventory", "token", "create", "--role", "host", "--host", "gpu-1",
		"--name", "agent", "--db", dsn); code != 0 {
		t.Fatalf("token create on the shared database: exit %d: %s%s", code, out, errOut)
	}
	list, errOut, code := run(t, nil, "mps-inventory", "token", "list", "--db", dsn)
	if code != 0 || strings.Count(list, "local-admin") != 2 || !strings.Contains(list, "agent") {
		t.Errorf("token list: exit %d %s; want both inventories' admin tokens and the agent's:\n%s", code, errOut, list)
	}

	// Each admin token works on both inventories: one database.
	for _, in := range invs {
		for _, other := range invs {
			if s := hostsStatus(t, in.url, other.token); s != 200 {
				t.Errorf("GET %s/hosts with the other inventory's admin token: %d", in.url, s)
			}
		}
	}
	req := `{"host":{"name":"gpu-1"}}`
	if out := postJSON(t, a.url+"/hosts", a.token, req); !strings.Contains(out, `"name":"gpu-1"`) {
		t.Fatalf("POST /hosts: %s", out)
	}
	var hosts api.HostList
	if err := json.Unmarshal([]byte(mpsctl(b, "-o", "json", "host-list")), &hosts); err != nil {
		t.Fatal(err)
	}
	if hosts.Total != 1 || len(hosts.Hosts) != 1 || hosts.Hosts[0].Name != "gpu-1" {
		t.Errorf("the other inventory lists %+v, want the host gpu-1", hosts)
	}
	for i, in := range invs {
		if err := in.p.Stop(t); err != nil {
			t.Errorf("inventory %d exit: %v\n%s", i, err, in.p.Output())
		}
	}
}

// postJSON posts body to url with the token and returns the answer's body;
// anything but 200 fails the test.
func postJSON(t *testing.T, url, token, body string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s (%v)", url, resp.StatusCode, b, err)
	}
	return string(b)
}
