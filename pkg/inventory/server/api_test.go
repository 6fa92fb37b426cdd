package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// checkError asserts an api.Error answer.
func checkError(t *testing.T, status int, body []byte, wantStatus int, wantClass, wantDetails string) {
	t.Helper()
	var ae api.Error
	if err := json.Unmarshal(body, &ae); err != nil {
		t.Fatalf("answer %d %s is not an api.Error: %v", status, body, err)
	}
	if status != wantStatus || ae.Code != wantStatus || ae.Class != wantClass || !strings.Contains(ae.Details, wantDetails) {
		t.Errorf("got %d %+v\nwant %d %s with details containing %q", status, ae, wantStatus, wantClass, wantDetails)
	}
}

func TestErrorAnswers(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{MaxBodyBytes: 4096})
		_, d := e.seed()
		dev := func(fields string) string {
			return `{"isolated_device":{"host_id":"gpu-1","dev_type":"NVIDIA_MPS","addr":"00:07.0-0","vendor_device_id":"10de:1b38"` + fields + `}}`
		}
		big := dev(`,"name":"` + strings.Repeat("x", 5000) + `"`)
		const bad, nf, dup = http.StatusBadRequest, http.StatusNotFound, http.StatusConflict
		long := func(n int) string { return strings.Repeat("x", n) }
		tests := []struct {
			name, method, path, body string
			status                   int
			class, details           string
		}{
			{"truncated JSON", "POST", "/isolated_devices", `{"isolated_device":{`, bad, api.ClassInputParameter, "malformed JSON"},
			{"syntax error", "POST", "/isolated_devices", `{"isolated_device":{x}}`, bad, api.ClassInputParameter, "malformed JSON at byte"},
			{"empty body", "POST", "/isolated_devices", ``, bad, api.ClassInputParameter, "request body is empty"},
			{"two values", "POST", "/isolated_devices", dev("") + `{}`, bad, api.ClassInputParameter, "more than one JSON value"},
			{"unknown envelope", "POST", "/isolated_devices", `{"device":{}}`, bad, api.ClassInputParameter, "missing field isolated_device"},
			{"envelope not an object", "POST", "/isolated_devices", `{"isolated_device":"x"}`, bad, api.ClassInputParameter, "field isolated_device: expected"},
			{"pcie_info not an object", "POST", "/isolated_devices", dev(`,"pcie_info":7`), bad, api.ClassInputParameter, "field pcie_info"},
			{"missing envelope", "POST", "/isolated_devices", `{}`, bad, api.ClassInputParameter, "missing field isolated_device"},
			{"missing dev_type", "POST", "/isolated_devices", `{"isolated_device":{"host_id":"gpu-1","addr":"a","vendor_device_id":"v"}}`, bad, api.ClassInputParameter, "missing required field dev_type"},
			{"missing host_id", "POST", "/isolated_devices", `{"isolated_device":{"dev_type":"NVIDIA_MPS","addr":"a","vendor_device_id":"v"}}`, bad, api.ClassInputParameter, "missing required field host_id"},
			{"wrong type", "POST", "/isolated_devices", dev(`,"numa_node":"zero"`), bad, api.ClassInputParameter, "field isolated_device.numa_node"},
			{"oversized body", "POST", "/isolated_devices", big, http.StatusRequestEntityTooLarge, api.ClassTooLarge, "larger than 4096 bytes"},
			// Issue 12 item 9: every string is bounded, the field named.
			{"name too long", "POST", "/isolated_devices", dev(`,"name":"` + long(129) + `"`), bad, api.ClassInputParameter,
				"field name: 129 bytes, longer than the 128 allowed"},
			{"model too long", "POST", "/isolated_devices", dev(`,"model":"` + long(513) + `"`), bad, api.ClassInputParameter, "field model: 513 bytes"},
			{"device_path too long", "PUT", "/isolated_devices/" + d.ID, `{"isolated_device":{"device_path":"` + long(129) + `"}}`, bad, api.ClassInputParameter, "field device_path: "},
			{"host name too long", "POST", "/hosts", `{"host":{"name":"` + long(129) + `"}}`, bad, api.ClassInputParameter, "field name: "},
			// Issue 34: a host's name as the region takes names, no path
			// separator and no right-to-left override.
			{"host name with a path", "POST", "/hosts", `{"host":{"name":"../../x"}}`, bad, api.ClassInputParameter, `field name: it holds "/"`},
			{"host name with a direction override", "POST", "/hosts", `{"host":{"name":"gpu\u202e1"}}`, bad, api.ClassInputParameter, "field name: it holds U+202E"},
			{"sharing_mode unknown", "POST", "/isolated_devices", dev(`,"sharing_mode":"SHARED"`), bad, api.ClassInputParameter, `sharing_mode "SHARED" is not one of`},
			{"negative limit", "GET", "/isolated_devices?limit=-1", "", bad, api.ClassInputParameter, "query parameter limit"},
			{"text limit", "GET", "/isolated_devices?limit=ten", "", bad, api.ClassInputParameter, "query parameter limit"},
			{"negative offset", "GET", "/hosts?offset=-5", "", bad, api.ClassInputParameter, "query parameter offset"},
			{"bad unused", "GET", "/isolated_devices?unused=maybe", "", bad, api.ClassInputParameter, "query parameter unused"},
			{"bad details", "GET", "/isolated_devices/" + d.ID + "?details=2", "", bad, api.ClassInputParameter, "query parameter details"},
			{"move device", "PUT", "/isolated_devices/" + d.ID, `{"isolated_device":{"host_id":"other"}}`, bad, api.ClassInputParameter, "host_id cannot be changed"},
			{"host without name", "POST", "/hosts", `{"host":{}}`, bad, api.ClassInputParameter, "missing required field name"},
			{"unknown device", "GET", "/isolated_devices/" + unknownUUID, "", nf, api.ClassNotFound, "isolated_device " + unknownUUID + " not found"},
			// A name where an id goes is looked up; an unknown one is a 404,
			// which climc's name lookup relies on.
			{"unknown device name", "GET", "/isolated_devices/no-such-name", "", nf, api.ClassNotFound, "isolated_device no-such-name not found"},
			{"unknown device name, purge", "POST", "/isolated_devices/no-such-name/purge", "", nf, api.ClassNotFound, "isolated_device no-such-name not found"},
			{"delete unknown device", "DELETE", "/isolated_devices/" + unknownUUID, "", nf, api.ClassNotFound, "not found"},
			{"unknown host", "GET", "/hosts/nope", "", nf, api.ClassNotFound, `host "nope" not found`},
			{"device on unknown host", "POST", "/isolated_devices", strings.Replace(dev(""), "gpu-1", "gpu-9", 1), nf, api.ClassNotFound, `host "gpu-9" not found`},
			{"list of unknown host", "GET", "/isolated_devices?host_id=gpu-9", "", nf, api.ClassNotFound, `host "gpu-9" not found`},
			{"no route", "GET", "/servers", "", nf, api.ClassHandlerNotFound, "mps-inventory has no GET /servers"},
			{"host agent's metadata", "POST", "/hosts/gpu-1/metadata", `{"host":{}}`, nf, api.ClassHandlerNotFound, "mps-inventory has no POST /hosts/gpu-1/metadata"},
			{"keystone users", "GET", "/v3/users", "", nf, api.ClassHandlerNotFound, "/v3/auth/tokens only, not GET /v3/users"},
			{"list with a trailing slash", "GET", "/isolated_devices/", "", nf, api.ClassHandlerNotFound, "mps-inventory has no GET /isolated_devices/"},
			{"PATCH of a device", "PATCH", "/isolated_devices/" + d.ID, `{"isolated_device":{}}`, http.StatusMethodNotAllowed, api.ClassMethodNotAllowed, "PATCH is not served on /isolated_devices/" + d.ID + ": use GET, HEAD, PUT, DELETE"},
			{"duplicate device", "POST", "/isolated_devices", p40Slice, dup, api.ClassDuplicate, "already exists"},
			{"duplicate host", "POST", "/hosts", `{"host":{"name":"gpu-1"}}`, dup, api.ClassDuplicate, `host "gpu-1" already exists`},
			{"host with devices", "DELETE", "/hosts/gpu-1", "", http.StatusNotAcceptable, api.ClassNotEmpty, "still has 1 isolated devices"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				status, body := e.call(tt.method, tt.path, tt.body)
				checkError(t, status, body, tt.status, tt.class, tt.details)
			})
		}
	})
}

func TestUpdateHeldDeviceAndDelete(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		_, d := e.seed()
		path := "/isolated_devices/" + d.ID

		// A PUT changes only the fields it sends (and counts), and answers
		// with the details, as Cloudpods does.
		var got api.IsolatedDeviceBody
		e.mustCall("PUT", path, `{"isolated_device":{"guest_id":"guest-1"}}`, &got)
		want := d
		want.GuestID, want.Guest, want.UpdatedAt, want.UpdateVersion = "guest-1", "guest-1", got.IsolatedDevice.UpdatedAt, 1
		if !reflect.DeepEqual(got.IsolatedDevice, want) {
			t.Errorf("after PUT guest_id:\n%+v\nwant\n%+v", got.IsolatedDevice, want)
		}

		// Cloudpods' answers, whose text its host agent matches.
		for _, req := range []struct {
			method, path string
			status       int
			class        string
		}{
			{"DELETE", path, http.StatusNotAcceptable, api.ClassNotEmpty},
			{"POST", path + "/purge", http.StatusBadRequest, api.ClassBadRequest},
		} {
			status, body := e.call(req.method, req.path, "")
			checkError(t, status, body, req.status, req.class, api.MsgDeviceUsedByServer)
			var ae api.Error
			_ = json.Unmarshal(body, &ae)
			if ae.Details != api.MsgDeviceUsedByServer {
				t.Errorf("%s %s details = %q, want exactly %q", req.method, req.path, ae.Details, api.MsgDeviceUsedByServer)
			}
		}

		// A client may send back the whole device it read: read-only fields
		// with their current values are accepted. pcie_info null clears it.
		got.IsolatedDevice.GuestID = ""
		got.IsolatedDevice.Host = "gpu-1"
		full, _ := json.Marshal(api.IsolatedDeviceBody{IsolatedDevice: got.IsolatedDevice})
		fullNoPCIE := strings.Replace(string(full), `"pcie_info":{"lane_width":16,"throughput":"15.76 GB/s","transfer_rate_per_lane":"8GT/s","version":"3.0"}`, `"pcie_info":null`, 1)
		var cleared api.IsolatedDeviceBody
		e.mustCall("PUT", path, fullNoPCIE, &cleared)
		if c := cleared.IsolatedDevice; c.GuestID != "" || c.PCIEInfo != nil || c.Host != "gpu-1" || c.Model != d.Model {
			t.Errorf("after full PUT: %+v; want guest and pcie_info cleared, the rest kept", c)
		}

		e.mustCall("POST", path+"/purge", "", &got)
		if got.IsolatedDevice.ID != d.ID {
			t.Errorf("purge answered %+v, want the purged device", got.IsolatedDevice)
		}
		status, body := e.call("GET", path, "")
		checkError(t, status, body, http.StatusNotFound, api.ClassNotFound, "not found")
		e.mustCall("DELETE", "/hosts/gpu-1", "", nil)
	})
}

// No limit reads more than 2048 rows, whatever it asks: a page is bounded
// for the server as for the client, and the answer says the limit it kept.
func TestListPageIsBoundedAtTheMaximum(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		h, _ := e.seed() // one device
		var devs []api.IsolatedDevice
		for i := range maxLimit + 99 {
			devs = append(devs, api.IsolatedDevice{HostID: h.ID, DevType: api.DevTypeNvidiaMPS, Model: "NVIDIA H100",
				Addr: fmt.Sprintf("%02x:00.0-%d", 0x10+i/100, i%100), VendorDeviceID: "10de:2330", Index: -1, DeviceMinor: -1})
		}
		for len(devs) > 0 {
			n := min(len(devs), store.MaxCreateDevices)
			if _, err := e.st.CreateDevices(t.Context(), devs[:n]); err != nil {
				t.Fatal(err)
			}
			devs = devs[n:]
		}
		for _, tt := range []struct {
			query             string
			wantRows, wantLim int
		}{
			{"?limit=5000", maxLimit, maxLimit},
			{"?limit=1000000000", maxLimit, maxLimit},
			{"", maxLimit, maxLimit},
			{"?limit=3000&offset=2000", 148, maxLimit},
			{"?limit=10", 10, 10},
		} {
			var list api.IsolatedDeviceList
			e.mustCall("GET", "/isolated_devices"+tt.query, "", &list)
			if len(list.IsolatedDevices) != tt.wantRows || list.Limit != tt.wantLim || list.Total != maxLimit+100 {
				t.Errorf("%s: %d rows, limit %d, total %d; want %d rows, limit %d, total %d",
					tt.query, len(list.IsolatedDevices), list.Limit, list.Total, tt.wantRows, tt.wantLim, maxLimit+100)
			}
		}
		var hosts api.HostList
		e.mustCall("GET", "/hosts?limit=5000", "", &hosts)
		if hosts.Limit != 5000 || len(hosts.Hosts) != 1 {
			t.Errorf("hosts: limit %d, %d rows; want 5000 as asked (one host matches)", hosts.Limit, len(hosts.Hosts))
		}
	})
}

func TestListQueryParameters(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		_, held := e.seed()
		for i := range 3 {
			body := strings.NewReplacer("00:06.0-1", fmt.Sprintf("00:07.0-%d", i), "Tesla P40", "NVIDIA H100", "GPU-76", "GPU-99").Replace(p40Slice)
			e.mustCall("POST", "/isolated_devices", body, nil)
		}
		e.mustCall("PUT", "/isolated_devices/"+held.ID, `{"isolated_device":{"guest_id":"guest-1"}}`, nil)

		tests := []struct {
			query      string
			wantAddrs  string
			wantTotal  int
			wantLimit  int
			wantOffset int
		}{
			// Newest first, all rows up to 2048 when limit is absent or 0,
			// a larger limit kept as asked (fewer than 2048 rows match).
			{"", "00:07.0-2 00:07.0-1 00:07.0-0 00:06.0-1", 4, 2048, 0},
			{"?order=asc", "00:06.0-1 00:07.0-0 00:07.0-1 00:07.0-2", 4, 2048, 0},
			{"?order_by=created_at&order=asc", "00:06.0-1 00:07.0-0 00:07.0-1 00:07.0-2", 4, 2048, 0},
			{"?limit=2&offset=1", "00:07.0-1 00:07.0-0", 4, 2, 1},
			{"?limit=0", "00:07.0-2 00:07.0-1 00:07.0-0 00:06.0-1", 4, 2048, 0},
			{"?limit=5000", "00:07.0-2 00:07.0-1 00:07.0-0 00:06.0-1", 4, 5000, 0},
			{"?host_id=gpu-1&dev_type=NVIDIA_MPS&model=NVIDIA+H100", "00:07.0-2 00:07.0-1 00:07.0-0", 3, 2048, 0},
			{"?host=gpu-1&dev_type.0=NVIDIA_GPU_SHARE&dev_type.1=NVIDIA_MPS&model.0=NVIDIA+H100", "00:07.0-2 00:07.0-1 00:07.0-0", 3, 2048, 0},
			{"?model=NVIDIA+H100&model=Tesla+P40&limit=1&offset=3", "00:06.0-1", 4, 1, 3},
			{"?addr=00:07.0-1", "00:07.0-1", 1, 2048, 0},
			{"?addr.0=00:07.0-1&addr.1=00:06.0-1&order=asc", "00:06.0-1 00:07.0-1", 2, 2048, 0},
			{"?device_path=GPU-76aef7ff-372d-2432-b4b4-beca4d8d3400", "00:06.0-1", 1, 2048, 0},
			// gpu: Cloudpods' boolean, or a device_path from older clients of ours.
			{"?gpu=GPU-76aef7ff-372d-2432-b4b4-beca4d8d3400", "00:06.0-1", 1, 2048, 0},
			{"?gpu=false", "00:07.0-2 00:07.0-1 00:07.0-0 00:06.0-1", 4, 2048, 0},
			{"?gpu=true", "", 0, 0, 0},
			{"?guest_id=guest-1", "00:06.0-1", 1, 2048, 0},
			{"?server=guest-1", "00:06.0-1", 1, 2048, 0},
			{"?unused=true&limit=1", "00:07.0-2", 3, 1, 0},
			{"?vendor=NVIDIA&vendor_device_id=10de:1b38&numa_node=-1&index=-1&limit=1", "00:07.0-2", 4, 1, 0},
			{"?name=mps-00:06.0-1", "00:06.0-1", 1, 2048, 0},
			{"?dev_type=NVIDIA_GPU_SHARE", "", 0, 0, 0},
			// What climc sends besides, and parameters no one knows: ignored.
			{"?scope=system&summary_stats=false&details=false&provider=OneCloud&bogus=1", "00:07.0-2 00:07.0-1 00:07.0-0 00:06.0-1", 4, 2048, 0},
		}
		for _, tt := range tests {
			t.Run(tt.query, func(t *testing.T) {
				var list api.IsolatedDeviceList
				b := e.mustCall("GET", "/isolated_devices"+tt.query, "", &list)
				var addrs []string
				for _, d := range list.IsolatedDevices {
					addrs = append(addrs, d.Addr)
				}
				if got := strings.Join(addrs, " "); got != tt.wantAddrs || list.Total != tt.wantTotal ||
					list.Limit != tt.wantLimit || list.Offset != tt.wantOffset {
					t.Errorf("got %q total %d limit %d offset %d\nwant %q total %d limit %d offset %d",
						got, list.Total, list.Limit, list.Offset, tt.wantAddrs, tt.wantTotal, tt.wantLimit, tt.wantOffset)
				}
				if !strings.Contains(string(b), `"isolated_devices":[`) {
					t.Errorf("isolated_devices is not an array: %s", b)
				}
			})
		}
	})
}
