package cloudpods

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/replay"
)

// What make test-cloudpods records goes through the proxies to the
// services and back unchanged, is written without secrets, and is cut
// into one cassette a test by replay.Derive.
func TestRecordedExchangesBecomeCassettes(t *testing.T) {
	const password, token = "Secret-pass-1", "gAAAA-secret-token"

	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/slow" {
			w.WriteHeader(http.StatusCreated)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v3/auth/tokens" {
			w.Header().Set("X-Subject-Token", token)
			_, _ = w.Write([]byte(`{"token": {"expires_at": "2026-11-27T12:00:00.000000Z", "user": {"name": "sysadmin"}}}`))
			return
		}
		if r.Header.Get("X-Auth-Token") != token {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{"isolated_devices": [{"id": "0a3e1df2-20c2-4ad0-80aa-09ea687f246a", "addr": "18:00.0"}], "got": ` + strconv.Quote(string(b)) + `}`))
	}))
	t.Cleanup(backend.Close)
	path := filepath.Join(t.TempDir(), "region.jsonl")
	t.Setenv(EnvRecord, path)
	rec, err := openRecorder()
	if err != nil {
		t.Fatal(err)
	}
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	_, realPort, _ := net.SplitHostPort(strings.TrimPrefix(backend.URL, "http://"))
	rp, _ := strconv.Atoi(realPort)
	srv, err := rec.serve("keystone", ports[0], rp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	rec.event(replay.EventSetup)
	rec.event(replay.EventReady)
	rec.event(replay.TestEvent("TestSomething"))
	base := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	hdr, err := Request(t.Context(), http.MethodPost, base+"/v3/auth/tokens", "", map[string]any{"auth": map[string]any{"password": password}}, nil)
	if err != nil || hdr.Get("X-Subject-Token") != token {
		t.Fatalf("through the proxy: %v %v", hdr, err)
	}
	var out struct {
		Got string `json:"got"`
	}
	if _, err := Request(t.Context(), http.MethodPut, base+"/isolated_devices/x?details=true", token, map[string]any{"isolated_device": map[string]any{"addr": "18:00.0"}}, &out); err != nil {
		t.Fatal(err)
	}
	if out.Got != `{"isolated_device":{"addr":"18:00.0"}}` {
		t.Errorf("the service got %q through the proxy", out.Got)
	}
	// A client that went before the answer (a daemon stopped while its
	// request was in flight): what the service answered is recorded all
	// the same, not the proxy's own 502.
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	slow := httptest.NewRequestWithContext(gone, http.MethodPost, base+"/slow", strings.NewReader(`{"x":1}`))
	rec.proxy("region", &url.URL{Scheme: "http", Host: strings.TrimPrefix(backend.URL, "http://")}).ServeHTTP(httptest.NewRecorder(), slow)
	// The service away (an outage): the proxy's own 502 says so, and a
	// cassette leaves it out (a replay's outage closes connections).
	away := httptest.NewRecorder()
	rec.proxy("region", &url.URL{Scheme: "http", Host: "127.0.0.1:1"}).ServeHTTP(away, httptest.NewRequest(http.MethodGet, base+"/away", nil))
	if away.Code != http.StatusBadGateway || !strings.HasPrefix(away.Body.String(), "proxy: ") {
		t.Fatalf("the service away: %d %q", away.Code, away.Body.String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`"path":"/slow".*"status":201`).Match(b) {
		t.Fatalf("the answer to a client that went:\n%s", b)
	}
	if strings.Contains(string(b), password) || strings.Contains(string(b), token) {
		t.Fatalf("a secret was recorded:\n%s", b)
	}
	cs, err := replay.Derive(replay.Source{File: path})
	if err != nil {
		t.Fatal(err)
	}
	c := cs["TestSomething"]
	if len(cs) != 1 || c == nil || len(c.Exchanges) != 3 {
		t.Fatalf("cassettes %v", cs)
	}
	put := c.Exchanges[1]
	var req, ans any
	_ = json.Unmarshal(put.Request, &req)
	_ = json.Unmarshal(put.Response, &ans)
	if put.Method != http.MethodPut || put.Path != "/isolated_devices/x?details=true" || put.Status != 200 ||
		!strings.Contains(string(put.Response), `"id":"{{id:1}}"`) || !put.Write() {
		t.Fatalf("the PUT as a cassette holds it: %+v (request %v, answer %v)", put, req, ans)
	}
}
