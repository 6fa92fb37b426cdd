package server

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// seedGPUs registers host name with gpus GPUs of slices MPS slices each,
// model "NVIDIA H100 80GB HBM3", GPU i on NUMA node i/2; it returns the
// devices in creation order (GPU 0's slices first).
func seedGPUs(t *testing.T, st *store.Store, name string, gpus, slices int) []api.IsolatedDevice {
	t.Helper()
	ctx := t.Context()
	h, err := st.CreateHost(ctx, api.Host{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	var out []api.IsolatedDevice
	for g := range gpus {
		for i := range slices {
			d, err := st.CreateDevice(ctx, api.IsolatedDevice{
				HostID: h.ID, DevType: api.DevTypeNvidiaMPS, Model: "NVIDIA H100 80GB HBM3",
				Addr: fmt.Sprintf("%02x:00.0-%d", 0x1a+g, i), VendorDeviceID: "10de:2330",
				DevicePath: fmt.Sprintf("GPU-%d", g), NumaNode: g / 2, Index: -1, DeviceMinor: -1,
				MPSMemoryLimit: 81559 / slices, MPSMemoryTotal: 81559, MPSThreadPercentage: 100 / slices,
			})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
	}
	return out
}

func devAddrs(devs []api.IsolatedDevice) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.Addr
	}
	return out
}

func TestAttachDetachAPI(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		devs := seedGPUs(t, e.st, "gpu-1", 2, 2) // 1a-0, 1a-1, 1b-0, 1b-1
		unhealthy := true
		if _, err := e.st.UpdateDevice(t.Context(), devs[3].ID, store.DeviceUpdate{Unhealthy: &unhealthy}); err != nil {
			t.Fatal(err)
		}
		const model = `"model":"NVIDIA H100 80GB HBM3","host":"gpu-1"`
		const ok, bad, notEmpty = http.StatusOK, http.StatusBadRequest, http.StatusNotAcceptable
		attach := func(guest string) string { return "/servers/" + guest + "/attach-isolated-device" }
		detach := func(guest string) string { return "/servers/" + guest + "/detach-isolated-device" }
		purge := func(d api.IsolatedDevice) string { return "/isolated_devices/" + d.ID + "/purge" }
		byID := func(d api.IsolatedDevice) string { return `{"device":"` + d.ID + `"}` }

		// Steps run in order: each sees the state the ones before left.
		steps := []struct {
			name, method, path, body string
			status                   int
			want                     []string // addrs answered, for 200
			class, details           string   // for errors
			detached                 string   // detached_guest of a purge
		}{
			{name: "attach by id", method: "POST", path: attach("pod-a"), body: byID(devs[0]), status: ok, want: []string{"1a:00.0-0"}},
			{name: "again by the same guest", method: "POST", path: attach("pod-a"), body: byID(devs[0]), status: ok, want: []string{"1a:00.0-0"}},
			{name: "held by another guest", method: "POST", path: attach("pod-b"), body: byID(devs[0]), status: bad,
				class: api.ClassBadRequest, details: api.MsgDeviceUsedByServer + " pod-a"},
			{name: "unhealthy", method: "POST", path: attach("pod-b"), body: byID(devs[3]), status: bad,
				class: api.ClassInsufficientResource, details: "is unhealthy"},
			{name: "more than free: nothing attached", method: "POST", path: attach("pod-b"), body: `{` + model + `,"count":3}`, status: bad,
				class: api.ClassInsufficientResource, details: `need 3 free NVIDIA_MPS "NVIDIA H100 80GB HBM3" devices on host gpu-1, 2 free`},
			{name: "by model", method: "POST", path: attach("pod-b"), body: `{"dev_type":"NVIDIA_MPS",` + model + `,"count":2}`, status: ok,
				want: []string{"1a:00.0-1", "1b:00.0-0"}},
			{name: "by model on a full NUMA node", method: "POST", path: attach("pod-c"), body: `{` + model + `,"numa_node":0}`, status: bad,
				class: api.ClassInsufficientResource, details: "NUMA node 0, 0 free"},
			{name: "unknown device", method: "POST", path: attach("pod-c"), body: `{"device":"no-such-device"}`, status: http.StatusNotFound,
				class: api.ClassNotFound, details: "isolated_device no-such-device not found"},
			{name: "unknown host", method: "POST", path: attach("pod-c"), body: `{"model":"x","host":"gpu-9"}`, status: http.StatusNotFound,
				class: api.ClassNotFound, details: `host "gpu-9" not found`},

			{name: "detach another guest's device", method: "POST", path: detach("pod-b"), body: byID(devs[0]), status: bad,
				class: api.ClassBadRequest, details: api.MsgDeviceUsedByServer + " pod-a, not by pod-b"},
			{name: "detach by id", method: "POST", path: detach("pod-a"), body: byID(devs[0]), status: ok, want: []string{"1a:00.0-0"}},
			{name: "detach a free device: nothing to do", method: "POST", path: detach("pod-a"), body: byID(devs[0]), status: ok, want: []string{}},
			{name: "detach all", method: "POST", path: detach("pod-b"), body: `{"all":true}`, status: ok, want: []string{"1a:00.0-1", "1b:00.0-0"}},
			{name: "detach all of nothing", method: "POST", path: detach("pod-b"), body: `{"all":true}`, status: ok, want: []string{}},

			{name: "attach for purge", method: "POST", path: attach("pod-d"), body: byID(devs[1]), status: ok, want: []string{"1a:00.0-1"}},
			{name: "purge of a held device", method: "POST", path: purge(devs[1]), status: bad,
				class: api.ClassBadRequest, details: api.MsgDeviceUsedByServer},
			{name: "purge without force", method: "POST", path: purge(devs[1]), body: `{"force":false}`, status: bad,
				class: api.ClassBadRequest, details: api.MsgDeviceUsedByServer},
			{name: "purge without Cloudpods' purge", method: "POST", path: purge(devs[1]), body: `{"isolated_device":{"purge":false}}`, status: bad,
				class: api.ClassBadRequest, details: api.MsgDeviceUsedByServer},
			{name: "delete never forces", method: "DELETE", path: "/isolated_devices/" + devs[1].ID, body: `{"force":true}`, status: notEmpty,
				class: api.ClassNotEmpty, details: api.MsgDeviceUsedByServer},
			{name: "force purge", method: "POST", path: purge(devs[1]), body: `{"force":true}`, status: ok, want: []string{"1a:00.0-1"}, detached: "pod-d"},
			{name: "purge of a free device", method: "POST", path: purge(devs[2]), status: ok, want: []string{"1b:00.0-0"}},
			{name: "purged is gone", method: "POST", path: purge(devs[2]), status: http.StatusNotFound, class: api.ClassNotFound, details: "not found"},
		}
		for _, st := range steps {
			t.Run(st.name, func(t *testing.T) {
				status, body := e.call(st.method, st.path, st.body)
				if st.status != ok {
					checkError(t, status, body, st.status, st.class, st.details)
					return
				}
				if status != ok {
					t.Fatalf("%d %s", status, body)
				}
				var got []api.IsolatedDevice
				if strings.HasSuffix(st.path, "/purge") {
					var pb api.PurgeBody
					if err := json.Unmarshal(body, &pb); err != nil {
						t.Fatal(err)
					}
					if pb.DetachedGuest != st.detached || pb.IsolatedDevice.GuestID != st.detached {
						t.Errorf("purge answered detached_guest %q, guest_id %q; want %q", pb.DetachedGuest, pb.IsolatedDevice.GuestID, st.detached)
					}
					got = []api.IsolatedDevice{pb.IsolatedDevice}
				} else {
					var lb api.IsolatedDevicesBody
					if err := json.Unmarshal(body, &lb); err != nil || lb.IsolatedDevices == nil {
						t.Fatalf("answer %s: %v (want a list, [] when empty)", body, err)
					}
					got = lb.IsolatedDevices
				}
				if !slices.Equal(devAddrs(got), st.want) {
					t.Errorf("answered %q, want %q", devAddrs(got), st.want)
				}
			})
		}
		if got, want := storetest.Guests(t, e.st), map[string]string{"1a:00.0-0": "", "1b:00.0-1": ""}; !maps.Equal(got, want) {
			t.Errorf("final state %v, want %v", got, want)
		}
	})
}

// The purge answer without a guest carries no detached_guest at all.
func TestPurgeAnswerShape(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		devs := seedGPUs(t, e.st, "gpu-1", 1, 1)
		_, body := e.call("POST", "/isolated_devices/"+devs[0].ID+"/purge", "")
		var m map[string]json.RawMessage
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		if _, ok := m["detached_guest"]; ok || m["isolated_device"] == nil || len(m) != 1 {
			t.Errorf("answer %s: want only isolated_device", body)
		}
	})
}

func TestAttachBadInput(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{MaxBodyBytes: 1024})
		devs := seedGPUs(t, e.st, "gpu-1", 1, 2)
		dev := devs[0].ID
		const bad = http.StatusBadRequest
		tests := []struct{ name, path, body, details string }{
			{"guest with a space", "/servers/a%20b/attach-isolated-device", `{"device":"` + dev + `"}`, "guest:"},
			{"guest too long", "/servers/" + strings.Repeat("g", 129) + "/attach-isolated-device", `{"device":"` + dev + `"}`, "guest:"},
			{"detach guest with a slash", "/servers/a%2Fb/detach-isolated-device", `{"all":true}`, "guest:"},
			{"empty body", "/servers/g/attach-isolated-device", ``, "request body is empty"},
			{"neither form", "/servers/g/attach-isolated-device", `{}`, "missing field device, or model"},
			{"neither form, wrapped", "/servers/g/attach-isolated-device", `{"server":{}}`, "missing field device, or model"},
			{"both forms", "/servers/g/attach-isolated-device", `{"device":"` + dev + `","model":"m"}`, "field device: give either"},
			{"empty device", "/servers/g/attach-isolated-device", `{"device":""}`, "field device: empty"},
			{"wrapped not an object", "/servers/g/attach-isolated-device", `{"server":[1]}`, "expected a JSON object"},
			{"host without model", "/servers/g/attach-isolated-device", `{"host":"gpu-1"}`, "missing required field model"},
			{"count zero", "/servers/g/attach-isolated-device", `{"model":"m","host":"gpu-1","count":0}`, "field count"},
			{"count too large", "/servers/g/attach-isolated-device", `{"model":"m","host":"gpu-1","count":1000}`, "count: must be between 1 and 128"},
			{"count not a number", "/servers/g/attach-isolated-device", `{"model":"m","host":"gpu-1","count":"2"}`, "field count: expected int"},
			{"count not a number, wrapped", "/servers/g/attach-isolated-device", `{"server":{"model":"m","count":"2"}}`, "field server.count: expected int"},
			{"bad numa node", "/servers/g/attach-isolated-device", `{"model":"m","host":"gpu-1","numa_node":-3}`, "numa_node:"},
			{"detach both", "/servers/g/detach-isolated-device", `{"device":"` + dev + `","all":true}`, "give either device or detach_all"},
			{"detach both, wrapped", "/servers/g/detach-isolated-device", `{"server":{"device":"` + dev + `","detach_all":true}}`, "give either device or detach_all"},
			{"detach neither", "/servers/g/detach-isolated-device", `{"all":false}`, "missing field device, or detach_all"},
			{"purge malformed", "/isolated_devices/" + dev + "/purge", `{"force":`, "malformed JSON"},
			{"purge flag not a boolean", "/isolated_devices/" + dev + "/purge", `{"isolated_device":{"purge":"yes"}}`, "field isolated_device.purge: expected bool"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				status, body := e.call("POST", tt.path, tt.body)
				checkError(t, status, body, bad, api.ClassInputParameter, tt.details)
			})
		}
		status, body := e.call("POST", "/servers/g/attach-isolated-device", `{"model":"`+fmt.Sprintf("%02000d", 0)+`","host":"gpu-1"}`)
		checkError(t, status, body, http.StatusRequestEntityTooLarge, api.ClassTooLarge, "larger than 1024 bytes")
		// Unknown fields are ignored, as Cloudpods ignores them: a purge
		// that asks for "forced" is a plain purge, refused for a held
		// device. (The debug log names them: TestUnknownFieldsIgnored.)
		if _, err := e.st.AttachDevice(t.Context(), "g", devs[1].ID); err != nil {
			t.Fatal(err)
		}
		status, body = e.call("POST", "/isolated_devices/"+devs[1].ID+"/purge", `{"forced":true}`)
		checkError(t, status, body, bad, api.ClassBadRequest, api.MsgDeviceUsedByServer)
		if _, err := e.st.DetachDevice(t.Context(), "g", devs[1].ID); err != nil {
			t.Fatal(err)
		}
		if got := storetest.Guests(t, e.st); got["1a:00.0-0"] != "" || got["1a:00.0-1"] != "" {
			t.Errorf("refused requests attached devices: %v", got)
		}
	})
}

// Attaching, detaching and forcing a purge are admin's: a host token (which
// may sync its own devices) and a viewer token get 403 and change nothing.
func TestAllocRoutesAreAdminOnly(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		devs := seedGPUs(t, e.st, "gpu-1", 1, 2)
		if _, err := e.st.AttachDevice(t.Context(), "pod-a", devs[1].ID); err != nil {
			t.Fatal(err)
		}
		viewer, _, err := e.st.CreateToken(t.Context(), store.NewToken{Name: "v", Role: store.RoleViewer})
		if err != nil {
			t.Fatal(err)
		}
		host, _, err := e.st.CreateToken(t.Context(), store.NewToken{Name: "h", Role: store.RoleHost, Host: "gpu-1"})
		if err != nil {
			t.Fatal(err)
		}
		calls := []struct{ name, path, body string }{
			{"attach", "/servers/pod-b/attach-isolated-device", `{"device":"` + devs[0].ID + `"}`},
			{"attach by model", "/servers/pod-b/attach-isolated-device", `{"model":"NVIDIA H100 80GB HBM3","host":"gpu-1"}`},
			{"detach", "/servers/pod-a/detach-isolated-device", `{"all":true}`},
			{"force purge", "/isolated_devices/" + devs[1].ID + "/purge", `{"force":true}`},
		}
		for _, tok := range []struct{ role, token string }{{"viewer", viewer}, {"host", host}} {
			for _, c := range calls {
				t.Run(tok.role+" "+c.name, func(t *testing.T) {
					status, body := e.call("POST", c.path, c.body, "Authorization", "Bearer "+tok.token)
					checkError(t, status, body, http.StatusForbidden, api.ClassForbidden, "")
				})
			}
		}
		if got := storetest.Guests(t, e.st); got["1a:00.0-0"] != "" || got["1a:00.0-1"] != "pod-a" {
			t.Errorf("forbidden calls changed the devices: %v", got)
		}
	})
}

func TestListFlagFiltersAPI(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		devs := seedGPUs(t, e.st, "gpu-1", 1, 3)
		yes := true
		if _, err := e.st.UpdateDevice(t.Context(), devs[1].ID, store.DeviceUpdate{Unhealthy: &yes}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.UpdateDevice(t.Context(), devs[2].ID, store.DeviceUpdate{PendingRemoval: &yes}); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			query string
			want  []string
		}{
			{"unhealthy=true", []string{"1a:00.0-1"}},
			{"unhealthy=false&order=asc", []string{"1a:00.0-0", "1a:00.0-2"}},
			{"pending_removal=1", []string{"1a:00.0-2"}},
			{"unhealthy=false&pending_removal=false", []string{"1a:00.0-0"}},
			{"unhealthy=", []string{"1a:00.0-2", "1a:00.0-1", "1a:00.0-0"}},
		}
		for _, tt := range tests {
			t.Run(tt.query, func(t *testing.T) {
				var l api.IsolatedDeviceList
				e.mustCall("GET", "/isolated_devices?"+tt.query, "", &l)
				if got := devAddrs(l.IsolatedDevices); !slices.Equal(got, tt.want) || l.Total != len(tt.want) {
					t.Errorf("got %q (total %d), want %q", got, l.Total, tt.want)
				}
			})
		}
		status, body := e.call("GET", "/isolated_devices?pending_removal=soon", "")
		checkError(t, status, body, http.StatusBadRequest, api.ClassInputParameter, "query parameter pending_removal")
	})
}
