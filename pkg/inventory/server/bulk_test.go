package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// A bulk create creates every row, in the order given, and answers each
// as a single create (and a GET) answers it.
func TestBulkCreate(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		f := newScopeFixture(t, open())
		unnamed := strings.Replace(deviceJSON("gpu-1", "00:08.0-1"), `"host_id"`, `"name":"","host_id"`, 1)
		body := bulkJSON(deviceJSON("gpu-1", "00:08.0-2"), deviceJSON(f.gpu1.ID, "00:08.0-0"), unnamed)
		var got struct {
			IsolatedDevices []json.RawMessage `json:"isolated_devices"`
		}
		f.mustCall("POST", "/isolated_devices", body, &got)
		if len(got.IsolatedDevices) != 3 {
			t.Fatalf("answered %d devices, want 3", len(got.IsolatedDevices))
		}
		var ids []string
		for i, raw := range got.IsolatedDevices {
			var d api.IsolatedDevice
			if err := json.Unmarshal(raw, &d); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, d.ID)
			var shown struct {
				IsolatedDevice json.RawMessage `json:"isolated_device"`
			}
			f.mustCall("GET", "/isolated_devices/"+d.ID, "", &shown)
			if string(raw) != string(shown.IsolatedDevice) {
				t.Errorf("row %d answered\n%s\nGET answers\n%s", i, raw, shown.IsolatedDevice)
			}
			if d.HostID != f.gpu1.ID || d.Host != "gpu-1" || d.Name == "" {
				t.Errorf("row %d: host_id %q host %q name %q", i, d.HostID, d.Host, d.Name)
			}
		}
		devs, _, err := f.st.ListDevices(t.Context(), store.DeviceFilter{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var addrs, listedIDs []string
		for _, d := range devs[len(devs)-3:] {
			addrs, listedIDs = append(addrs, d.Addr), append(listedIDs, d.ID)
		}
		if want := []string{"00:08.0-2", "00:08.0-0", "00:08.0-1"}; !slices.Equal(addrs, want) || !slices.Equal(listedIDs, ids) {
			t.Errorf("listed last %q %q, want %q %q", addrs, listedIDs, want, ids)
		}

		// As many as the cap in one request; an empty list creates nothing.
		rows := make([]string, api.MaxCreateDevices)
		for i := range rows {
			rows[i] = deviceJSON("spare", fmt.Sprintf("%02x:00.0-%d", i/16, i%16))
		}
		f.mustCall("POST", "/isolated_devices", bulkJSON(rows...), &got)
		if len(got.IsolatedDevices) != api.MaxCreateDevices {
			t.Errorf("answered %d devices at the cap, want %d", len(got.IsolatedDevices), api.MaxCreateDevices)
		}
		if b := f.mustCall("POST", "/isolated_devices", `{"isolated_devices":[]}`, nil); strings.TrimSpace(string(b)) != `{"isolated_devices":[]}` {
			t.Errorf("empty list answered %s", b)
		}
	})
}

// A bulk create that one row spoils creates nothing, and the refusal
// names the row and what is wrong with it, as a single create names the
// field.
func TestBulkCreateRefusals(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		f := newScopeFixture(t, open())
		good := deviceJSON("gpu-1", "00:08.0-0")
		with := func(addr, fields string) string {
			return strings.Replace(deviceJSON("gpu-1", addr), `"host_id"`, fields+`,"host_id"`, 1)
		}
		tooMany := make([]string, api.MaxCreateDevices+1)
		for i := range tooMany {
			tooMany[i] = `{"isolated_device":{}}`
		}
		const bad = http.StatusBadRequest
		tests := []struct {
			name, body     string
			status         int
			class, details string
		}{
			{"a field too long", bulkJSON(good, with("00:08.0-1", `"device_path":"`+strings.Repeat("x", 129)+`"`)), bad, api.ClassInputParameter,
				"isolated_devices[1]: field device_path: 129 bytes, longer than the 128 allowed"},
			{"a field missing", bulkJSON(good, strings.Replace(deviceJSON("gpu-1", "x"), `"addr":"x",`, "", 1)), bad, api.ClassInputParameter,
				"isolated_devices[1]: missing required field addr"},
			{"a field of the wrong type", bulkJSON(good, with("00:08.0-1", `"numa_node":"zero"`)), bad, api.ClassInputParameter,
				"field isolated_devices[1].numa_node: expected int"},
			{"pcie_info not an object", bulkJSON(good, with("00:08.0-1", `"pcie_info":7`)), bad, api.ClassInputParameter,
				"isolated_devices[1]: field pcie_info"},
			{"an id", bulkJSON(good, with("00:08.0-1", `"id":"mine"`)), bad, api.ClassInputParameter,
				"isolated_devices[1]: id is assigned by the server"},
			{"an existing device", bulkJSON(good, deviceJSON("gpu-1", "00:06.0-0")), http.StatusConflict, api.ClassDuplicate,
				"isolated_devices[1]: isolated device with vendor_device_id 10de:1b38 and addr 00:06.0-0 already exists on host " + f.gpu1.ID},
			{"one device twice", bulkJSON(good, deviceJSON("gpu-1", "00:08.0-1"), deviceJSON(f.gpu1.ID, "00:08.0-0")), http.StatusConflict, api.ClassDuplicate,
				"isolated_devices[2]: isolated device with vendor_device_id 10de:1b38 and addr 00:08.0-0 is isolated_devices[0] too"},
			{"an unknown host", bulkJSON(good, deviceJSON("gpu-9", "00:08.0-1")), http.StatusNotFound, api.ClassNotFound,
				`isolated_devices[1]: host "gpu-9" not found`},
			{"over the cap", bulkJSON(tooMany...), bad, api.ClassInputParameter,
				"field isolated_devices: at most 1000 isolated devices in one request, not 1001"},
			{"both forms", `{"isolated_device":{"addr":"x"},"isolated_devices":[]}`, bad, api.ClassInputParameter,
				"isolated_device (one device) or isolated_devices (a list), not both"},
			{"not a list", `{"isolated_devices":{"addr":"x"}}`, bad, api.ClassInputParameter,
				"field isolated_devices: expected a list of isolated devices, got JSON object"},
			{"a row not an object", `{"isolated_devices":[7]}`, bad, api.ClassInputParameter,
				"expected a JSON object, got JSON number"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				f.env.t = t
				status, ae := f.as("admin", "POST", "/isolated_devices", tt.body) // checks that nothing changed
				if status != tt.status || ae.Class != tt.class || !strings.Contains(ae.Details, tt.details) {
					t.Errorf("%d %+v\nwant %d %s with details containing %q", status, ae, tt.status, tt.class, tt.details)
				}
			})
		}
	})
}
