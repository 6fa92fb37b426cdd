package e2e

import (
	"encoding/json"
	"net/http"
	"regexp"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
)

// Issue 22: a method the inventory does not serve on a path it has is the
// client's error, 405 with Allow; a path it does not have is a 404. Both
// in Cloudpods' error body, and neither is logged at error: no client can
// fill the error log.
func TestInventoryAnswersUnservedMethodsAndPathsAsClientErrors(t *testing.T) {
	t.Parallel()
	inv, url := startInventory(t, "127.0.0.1:0")
	token := tokenFor(t, url)
	send := func(method, path string) (int, http.Header, api.Error) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ae api.Error
		if err := json.NewDecoder(resp.Body).Decode(&ae); err != nil {
			t.Errorf("%s %s: the body is not Cloudpods' error: %v", method, path, err)
		}
		return resp.StatusCode, resp.Header, ae
	}
	for _, m := range []string{"TRACE", "OPTIONS", "PATCH", "CONNECT", "PROPFIND"} {
		status, hdr, ae := send(m, "/isolated_devices")
		if status != http.StatusMethodNotAllowed || ae.Code != status || ae.Class != api.ClassMethodNotAllowed || hdr.Get("Allow") != "GET, HEAD, POST" {
			t.Errorf("%s /isolated_devices: %d Allow %q %+v, want 405 Allow \"GET, HEAD, POST\"", m, status, hdr.Get("Allow"), ae)
		}
	}
	for _, path := range []string{"/isolated_devices/", "/no/such/route"} {
		status, hdr, ae := send("GET", path)
		if status != http.StatusNotFound || ae.Code != status || ae.Class != api.ClassHandlerNotFound || hdr.Get("Allow") != "" {
			t.Errorf("GET %s: %d Allow %q %+v, want 404 %s", path, status, hdr.Get("Allow"), ae, api.ClassHandlerNotFound)
		}
	}
	// A client's errors: one info line, the rest summed up (issue 34); at
	// warn or error only the server's trouble and refused credentials.
	inv.logs(t, `msg="client error answered`)
	log := inv.Output()
	if regexp.MustCompile(`level=(ERROR|WARN) msg=request`).MatchString(log) {
		t.Errorf("a client's error logged at warn or error:\n%s", log)
	}
}
