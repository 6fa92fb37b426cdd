package server

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// A method no route serves on a path that has routes is the client's
// error: 405 naming the methods in Allow; a path with no route is a 404.
// Both in Cloudpods' error body, and logged at warn, never at error, so no
// client can fill the error log with them.
func TestUnservedMethodsAndPathsAreTheClientsError(t *testing.T) {
	st, err := store.OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "inv.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := newEnvOn(t, st, Options{})
	const id = "0b5e5b4e-5d5c-4d6a-9b1a-0c1d2e3f4a5b"
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
		details      string
	}{
		{"TRACE", "/isolated_devices", 405, "GET, HEAD, POST", "TRACE is not served on /isolated_devices: use GET, HEAD, POST"},
		{"OPTIONS", "/isolated_devices", 405, "GET, HEAD, POST", "OPTIONS is not served"},
		{"PATCH", "/isolated_devices", 405, "GET, HEAD, POST", "PATCH is not served"},
		{"CONNECT", "/isolated_devices", 405, "GET, HEAD, POST", "CONNECT is not served"},
		{"PROPFIND", "/isolated_devices", 405, "GET, HEAD, POST", "PROPFIND is not served"},
		{"PATCH", "/isolated_devices/" + id, 405, "GET, HEAD, PUT, DELETE", "use GET, HEAD, PUT, DELETE"},
		{"GET", "/isolated_devices/" + id + "/purge", 405, "POST", "use POST"},
		{"DELETE", "/servers/guest-1/attach-isolated-device", 405, "POST", "use POST"},
		{"PUT", "/v3/auth/tokens", 405, "GET, HEAD, POST, DELETE", "use GET, HEAD, POST, DELETE"},
		{"GET", "/isolated_devices/", 404, "", "mps-inventory has no GET /isolated_devices/"},
		{"TRACE", "/isolated_devices/", 404, "", "mps-inventory has no TRACE /isolated_devices/"},
		{"GET", "/servers", 404, "", "mps-inventory has no GET /servers"},
		{"GET", "/v3/users", 404, "", "/v3/auth/tokens only, not GET /v3/users"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			status, hdr, body := e.callFull(tc.method, tc.path, "")
			class := api.ClassHandlerNotFound
			if tc.status == http.StatusMethodNotAllowed {
				class = api.ClassMethodNotAllowed
			}
			checkError(t, status, body, tc.status, class, tc.details)
			if got := hdr.Get("Allow"); got != tc.allow {
				t.Errorf("Allow %q, want %q", got, tc.allow)
			}
		})
	}
	log := e.log.String()
	if strings.Contains(log, "level=ERROR") {
		t.Errorf("a client's error logged as the server's:\n%s", log)
	}
	if !strings.Contains(log, `level=DEBUG msg=request method=TRACE path=/isolated_devices status=405`) || strings.Contains(log, "level=WARN") {
		t.Errorf("the 405 is not logged at debug alone (a client's error, not the server's trouble):\n%s", log)
	}
}
