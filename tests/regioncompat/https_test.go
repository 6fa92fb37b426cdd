package regioncompat

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/pki"
	"yunion.io/x/mps-daemon/internal/testsupport/replay"
	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/inventory/server"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
	"yunion.io/x/mps-daemon/pkg/webtls"
)

// Issue 47: the recorded climc session over HTTPS. The inventory serves
// TLS through a web configuration file (pkg/webtls, as mps-inventory
// --web.config.file does); every keystone login climc sent is sent as it
// was (the password an API token's), and the catalog must name the
// https:// URL the client used wherever the region's named its own; the
// region requests then go where the catalog says, with the keystone
// token, and are answered as the region answered them.
func TestInventoryAnswersTheRecordedClimcOverHTTPS(t *testing.T) {
	c := loadCompat(t)
	st := storetest.Open(t, storetest.Backends()[0].DSN(t))
	ca := pki.NewCA(t, "site CA")
	dir := t.TempDir()
	f := ca.Issue(t, pki.Leaf{DNS: []string{"localhost"}}).WriteFiles(t, dir, "inventory")
	wc, err := webtls.LoadWebConfig(pki.WebConfig(t, dir, fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n", f.Cert, f.Key)))
	if err != nil {
		t.Fatal(err)
	}
	addr := pki.Serve(t, wc, server.New(st, server.Options{}, slog.New(slog.DiscardHandler)))
	_, port, _ := net.SplitHostPort(addr)
	base := "https://localhost:" + port // the name the certificate is for
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.Pool(ca)}}}

	const user = "compat-admin"
	apiToken, _, err := st.CreateToken(t.Context(), store.NewToken{Name: user, Role: store.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	logins, keystoneToken, compute := 0, "", ""
	for i, e := range c.Exchanges {
		if e.Service != "keystone" || e.Method != http.MethodPost || e.Path != "/v3/auth/tokens" {
			continue
		}
		logins++
		what := fmt.Sprintf("#%d keystone login", i)
		tok, catalog := login(t, client, base, what, e, user, apiToken)
		keystoneToken = tok
		compute = compareCatalog(t, what, e.Response, catalog, base)
	}
	if logins < 10 {
		t.Fatalf("%d keystone logins in the cassette: it lost its exchanges?", logins)
	}
	if compute != base {
		t.Fatalf("the catalog's compute_v2 endpoint is %q, want %q", compute, base)
	}
	replayRegion(t, c, compute, client, keystoneToken)

	// Plain HTTP to that port is no answer climc could use.
	resp, err := http.Get("http://" + addr + "/v3/auth/tokens")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if webtls.PlainToTLS(resp.StatusCode, body) == nil {
		t.Errorf("plain HTTP to the TLS port: %d %q", resp.StatusCode, body)
	}
}

// login sends the recorded keystone request with the user and password
// replaced by an API token's, and returns the keystone token and the
// catalog answered.
func login(t *testing.T, client *http.Client, base, what string, e replay.Exchange, user, password string) (string, []any) {
	t.Helper()
	var req map[string]any
	if err := json.Unmarshal(e.Request, &req); err != nil {
		t.Fatalf("%s: the recorded request: %v", what, err)
	}
	u := dig(req, "auth", "identity", "password", "user")
	if u == nil {
		t.Fatalf("%s: no password user in the recorded request: %s", what, e.Request)
	}
	u["name"], u["password"] = user, password
	body, _ := json.Marshal(req)
	r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v3/auth/tokens", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("User-Agent", "yunioncloud-go/201708")
	resp, err := client.Do(r)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer resp.Body.Close()
	var ans map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil || resp.StatusCode/100 != 2 {
		t.Fatalf("%s: %d %v", what, resp.StatusCode, err)
	}
	tok := resp.Header.Get("X-Subject-Token")
	catalog, _ := dig(ans, "token")["catalog"].([]any)
	if tok == "" || len(catalog) == 0 {
		t.Fatalf("%s: token %q, catalog %v", what, tok, catalog)
	}
	return tok, catalog
}

// compareCatalog checks that every endpoint of the recorded catalog (by
// service type and interface) is in got, at base where the region named
// itself ({{region}}) and base/v3 where it named its keystone. It returns
// got's internal compute_v2 URL, where climc sends its requests.
func compareCatalog(t *testing.T, what string, recorded []byte, got []any, base string) string {
	t.Helper()
	urls := func(catalog []any) map[string]string {
		m := map[string]string{}
		for _, svc := range catalog {
			s, _ := svc.(map[string]any)
			eps, _ := s["endpoints"].([]any)
			for _, ep := range eps {
				e, _ := ep.(map[string]any)
				m[fmt.Sprint(s["type"], " ", e["interface"])] = fmt.Sprint(e["url"])
			}
		}
		return m
	}
	var rec map[string]any
	if err := json.Unmarshal(recorded, &rec); err != nil {
		t.Fatalf("%s: the recorded answer: %v", what, err)
	}
	want, _ := dig(rec, "token")["catalog"].([]any)
	have := urls(got)
	if len(want) == 0 {
		t.Fatalf("%s: no catalog recorded", what)
	}
	for key, u := range urls(want) {
		u = strings.NewReplacer("{{region}}", base, "{{keystone}}", base).Replace(u)
		if have[key] != u {
			t.Errorf("%s: catalog %s: %q, want %q (the https:// URL the client used)", what, key, have[key], u)
		}
	}
	return have["compute_v2 internal"]
}

// dig follows keys through nested JSON objects; nil when one is missing.
func dig(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		next, ok := m[k].(map[string]any)
		if !ok {
			return nil
		}
		m = next
	}
	return m
}
