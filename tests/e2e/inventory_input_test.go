package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
)

// Issue 12, finding 9, on the real mps-inventory binary: a 1 MB host name
// and a 900 kB model are refused naming the field (the first is over the
// body limit: 413), a body that is not application/json is refused (415),
// and nothing is stored; a model at Cloudpods' width is taken.
func TestInventoryBoundsInput(t *testing.T) {
	_, url := startInventory(t, "127.0.0.1:0")
	token := tokenFor(t, url)
	send := func(method, path, contentType, body string) (int, api.Error) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ae api.Error
		_ = json.NewDecoder(resp.Body).Decode(&ae)
		return resp.StatusCode, ae
	}
	const jsonType = "application/json"
	if status, ae := send("POST", "/hosts", jsonType, `{"host":{"name":"gpu-1"}}`); status != http.StatusOK {
		t.Fatalf("creating gpu-1: %d %+v", status, ae)
	}
	device := func(model string) string {
		return `{"isolated_device":{"host_id":"gpu-1","dev_type":"NVIDIA_MPS","addr":"06:00.0-0","vendor_device_id":"10de:2330","model":"` + model + `"}}`
	}
	for _, tt := range []struct {
		name, method, path, contentType, body string
		status                                int
		class, details                        string
	}{
		{"1 MB host name", "POST", "/hosts", jsonType, `{"host":{"name":"` + strings.Repeat("h", 1<<20) + `"}}`,
			http.StatusRequestEntityTooLarge, api.ClassTooLarge, "request body is larger than 1048576 bytes"},
		{"host name over 128 bytes", "POST", "/hosts", jsonType, `{"host":{"name":"` + strings.Repeat("h", 129) + `"}}`,
			http.StatusBadRequest, api.ClassInputParameter, "field name: 129 bytes, longer than the 128 allowed"},
		{"900 kB model", "POST", "/isolated_devices", jsonType, device(strings.Repeat("m", 900<<10)),
			http.StatusBadRequest, api.ClassInputParameter, "field model: 921600 bytes, longer than the 512 allowed"},
		{"text body", "POST", "/hosts", "text/plain", `{"host":{"name":"gpu-2"}}`,
			http.StatusUnsupportedMediaType, api.ClassUnsupportedMediaType, "Content-Type must be application/json, not text/plain"},
		{"no content type", "POST", "/hosts", "", `{"host":{"name":"gpu-2"}}`,
			http.StatusUnsupportedMediaType, api.ClassUnsupportedMediaType, "not none"},
		{"form post", "PUT", "/hosts/gpu-1", "application/x-www-form-urlencoded", `host=x`,
			http.StatusUnsupportedMediaType, api.ClassUnsupportedMediaType, "application/x-www-form-urlencoded"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, ae := send(tt.method, tt.path, tt.contentType, tt.body)
			if status != tt.status || ae.Code != tt.status || ae.Class != tt.class || !strings.Contains(ae.Details, tt.details) {
				t.Errorf("%d %+v, want %d %s %q", status, ae, tt.status, tt.class, tt.details)
			}
		})
	}
	// Nothing of the refused requests was stored; a model at Cloudpods'
	// width (512) is taken.
	out, errOut, code := run(t, mpsctlEnv(t, url), "mpsctl", "-o", "json", "host-list")
	var hosts api.HostList
	if code != 0 || json.Unmarshal([]byte(out), &hosts) != nil || len(hosts.Hosts) != 1 || hosts.Hosts[0].Name != "gpu-1" {
		t.Errorf("hosts after the refusals: exit %d %s %s", code, out, errOut)
	}
	if status, ae := send("POST", "/isolated_devices", jsonType+"; charset=utf-8", device(strings.Repeat("m", 512))); status != http.StatusOK {
		t.Errorf("a 512-byte model: %d %+v", status, ae)
	}
}
