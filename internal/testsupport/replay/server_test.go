package replay

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func exchange(client, service, method, path, req string, status int, ans string) Exchange {
	e := Exchange{Client: client, Service: service, Method: method, Path: path, Status: status, Response: json.RawMessage(ans)}
	if req != "" {
		e.Request = json.RawMessage(req)
	}
	return e
}

var cassette = &Cassette{Cloud: CloudInfo{User: "sysadmin", Project: "system", Domain: "Default", Region: "region0", HostID: "{{id:1}}"},
	Exchanges: []Exchange{
		exchange("daemon", "keystone", "POST", "/v3/auth/tokens", `{"auth":{"identity":{"password":{"user":{"name":"sysadmin","password":"<redacted>"}}}}}`, 200,
			`{"token":{"expires_at":"{{time:86400.000}}","catalog":[{"type":"compute_v2","endpoints":[{"interface":"internal","url":"{{region}}"}]}]}}`),
		exchange("daemon", "keystone", "POST", "/v3/auth/tokens", `{"auth":{"identity":{"password":{"user":{"name":"sysadmin","password":"<redacted>"}}}}}`, 401,
			`{"code":401,"class":"WrongPassword"}`),
		exchange("daemon", "region", "GET", "/isolated_devices?host={{id:1}}", "", 200, `{"isolated_devices":[]}`),
		exchange("daemon", "region", "POST", "/isolated_devices", `{"isolated_device":{"host_id":"{{id:1}}","dev_type":"GPU","name":"{{name:1}}"}}`, 200,
			`{"isolated_device":{"id":"{{id:2}}","host_id":"{{id:1}}","name":"{{name:1}}"}}`),
		exchange("daemon", "region", "GET", "/isolated_devices?host={{id:1}}", "", 200, `{"isolated_devices":[{"id":"{{id:2}}","name":"{{name:1}}"}]}`),
	}}

type httpClient struct {
	t    *testing.T
	s    *Server
	tok  string
	base string
}

func (c *httpClient) do(method, path, body, password string) (int, string) {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = bytes.NewReader([]byte(body))
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("X-Auth-Token", c.tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if tok := resp.Header.Get("X-Subject-Token"); tok != "" {
		c.tok = tok
	}
	return resp.StatusCode, string(b)
}

func loginBody(password string) string {
	return `{"auth":{"identity":{"password":{"user":{"name":"sysadmin","password":"` + password + `"}}}}}`
}

// Reads are answered as recorded at the state the writes made, as often
// as asked; a wrong password gets the recorded refusal; a write that
// differs fails, naming the field, and changes nothing; placeholders bind
// once.
func TestReplayAnswersByState(t *testing.T) {
	f := &Failures{TB: t}
	s := ServeCassette(f, cassette)
	c := &httpClient{t: t, s: s, base: s.URL()}
	if st, _ := c.do("POST", "/v3/auth/tokens", loginBody("wrong"), ""); st != 401 {
		t.Fatalf("a wrong password: %d, want the recorded 401", st)
	}
	st, body := c.do("POST", "/v3/auth/tokens", loginBody(s.Password), "")
	if st != 200 || !strings.Contains(body, s.URL()) || c.tok == "" {
		t.Fatalf("login: %d %s", st, body)
	}
	host := s.Fill(cassette.Cloud.HostID)
	for range 3 {
		if st, body := c.do("GET", "/isolated_devices?host="+host, "", ""); st != 200 || body != `{"isolated_devices":[]}` {
			t.Fatalf("before the write: %d %s", st, body)
		}
	}
	st, body = c.do("POST", "/isolated_devices", `{"isolated_device":{"host_id":"`+host+`","dev_typ":"GPU","name":"gpu-a"}}`, "")
	if st != http.StatusConflict || !strings.Contains(f.All(), "field body.isolated_device.dev_type recorded (\"GPU\"), not sent") ||
		!strings.Contains(f.All(), "field body.isolated_device.dev_typ sent (\"GPU\"), not recorded") {
		t.Fatalf("a write with a field renamed: %d %s\nreported: %s", st, body, f.All())
	}
	f.Reset()
	if st, body := c.do("GET", "/isolated_devices?host="+host, "", ""); body != `{"isolated_devices":[]}` {
		t.Fatalf("after the refused write: %d %s, want the state before it", st, body)
	}
	st, body = c.do("POST", "/isolated_devices", `{"isolated_device":{"host_id":"`+host+`","dev_type":"GPU","name":"gpu-a"}}`, "")
	if st != 200 || !strings.Contains(body, `"name":"gpu-a"`) {
		t.Fatalf("the write: %d %s", st, body)
	}
	if st, body := c.do("GET", "/isolated_devices?host="+host, "", ""); !strings.Contains(body, `"name":"gpu-a"`) {
		t.Fatalf("after the write: %d %s", st, body)
	}
	if st, _ := c.do("GET", "/isolated_devices?host=another", "", ""); st != http.StatusConflict || !strings.Contains(f.All(), `query parameter host: "another" sent`) {
		t.Fatalf("another host: %d; reported %s", st, f.All())
	}
	f.Reset()
	if st, _ := c.do("GET", "/zones", "", ""); st != http.StatusConflict || !strings.Contains(f.All(), "GET /zones: not recorded at this point") {
		t.Fatalf("an unrecorded read: %d; reported %s", st, f.All())
	}
	f.Reset()
	f.Done()
	if f.All() != "" {
		t.Fatalf("every write made, yet: %s", f.All())
	}
}

// A write the recording has and the client never made fails the test.
func TestReplayFailsOnAWriteNeverMade(t *testing.T) {
	f := &Failures{TB: t}
	ServeCassette(f, cassette)
	f.Done()
	if !strings.Contains(f.All(), "1 recorded writes were never made, the first: #3 region POST /isolated_devices") {
		t.Fatalf("reported: %q", f.All())
	}
}
