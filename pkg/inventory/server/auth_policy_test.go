package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// scopeFixture is an inventory with two hosts that hold devices and a third
// without any, and a token of each role; the host token is gpu-1's.
type scopeFixture struct {
	*env
	tokens            map[string]string // role (or "none", "invalid") -> Authorization header
	gpu1, gpu2, spare api.Host
	// free and held are gpu-1's devices (held by guest "guest-1"); other is
	// gpu-2's.
	free, held, other api.IsolatedDevice
}

func newScopeFixture(t *testing.T, st *store.Store) *scopeFixture {
	t.Helper()
	f := &scopeFixture{env: newEnvOn(t, st, Options{}), tokens: map[string]string{
		"none": "", "invalid": "Bearer mpsi_0123456789abcdef_" + strings.Repeat("0", 64),
	}}
	for _, nt := range []store.NewToken{
		{Role: store.RoleAdmin}, {Role: store.RoleViewer}, {Role: store.RoleHost, Host: "gpu-1"},
	} {
		whole, _, err := f.st.CreateToken(t.Context(), nt)
		if err != nil {
			t.Fatal(err)
		}
		f.tokens[string(nt.Role)] = "Bearer " + whole
	}
	var hb api.HostBody
	for _, h := range []*api.Host{&f.gpu1, &f.gpu2, &f.spare} {
		name := map[*api.Host]string{&f.gpu1: "gpu-1", &f.gpu2: "gpu-2", &f.spare: "spare"}[h]
		f.mustCall("POST", "/hosts", `{"host":{"name":"`+name+`"}}`, &hb)
		*h = hb.Host
	}
	f.free = f.device(f.gpu1.ID, "00:06.0-0", "")
	f.held = f.device(f.gpu1.ID, "00:06.0-1", "guest-1")
	f.other = f.device(f.gpu2.ID, "00:06.0-0", "")
	return f
}

// device creates a device as admin.
func (f *scopeFixture) device(hostID, addr, guest string) api.IsolatedDevice {
	f.t.Helper()
	var db api.IsolatedDeviceBody
	f.mustCall("POST", "/isolated_devices", deviceJSON(hostID, addr), &db)
	if guest != "" {
		f.mustCall("POST", "/servers/"+guest+"/attach-isolated-device", `{"device":"`+db.IsolatedDevice.ID+`"}`, nil)
		f.mustCall("GET", "/isolated_devices/"+db.IsolatedDevice.ID, "", &db)
	}
	return db.IsolatedDevice
}

// bulkJSON is the bulk create of the devices of single-create bodies
// (deviceJSON's).
func bulkJSON(bodies ...string) string {
	rows := make([]string, len(bodies))
	for i, b := range bodies {
		rows[i] = strings.TrimSuffix(strings.TrimPrefix(b, `{"isolated_device":`), "}")
	}
	return `{"isolated_devices":[` + strings.Join(rows, ",") + `]}`
}

func deviceJSON(hostID, addr string) string {
	return `{"isolated_device":{"host_id":"` + hostID + `","dev_type":"NVIDIA_MPS","model":"Tesla P40",` +
		`"addr":"` + addr + `","vendor_device_id":"10de:1b38","mps_memory_limit":6144,"mps_memory_total":24576}}`
}

// snapshot is every host and device as stored, to show a refused request
// changed nothing.
func (f *scopeFixture) snapshot() string {
	f.t.Helper()
	hosts, _, err := f.st.ListHosts(f.t.Context(), store.HostFilter{Limit: 1000})
	if err != nil {
		f.t.Fatal(err)
	}
	devs, _, err := f.st.ListDevices(f.t.Context(), store.DeviceFilter{Limit: 1000})
	if err != nil {
		f.t.Fatal(err)
	}
	b, err := json.Marshal(map[string]any{"hosts": hosts, "devices": devs})
	if err != nil {
		f.t.Fatal(err)
	}
	return string(b)
}

// as sends a request with role's token and, when the answer is a refusal
// (any 4xx: 400, 401, 403, 404, 409), checks that nothing changed.
func (f *scopeFixture) as(role, method, path, body string) (int, api.Error) {
	f.t.Helper()
	before := f.snapshot()
	status, b := f.call(method, path, body, "Authorization", f.tokens[role])
	var ae api.Error
	if status != http.StatusOK {
		if err := json.Unmarshal(b, &ae); err != nil {
			f.t.Fatalf("%s %s as %s: %d %s is not an api.Error", method, path, role, status, b)
		}
	}
	if status >= 400 && status < 500 {
		if after := f.snapshot(); after != before {
			f.t.Errorf("%s %s as %s was refused (%d) but changed the database:\nbefore %s\nafter  %s",
				method, path, role, status, before, after)
		}
	}
	return status, ae
}

// TestRoleMatrix sends a representative request of every route with every
// kind of caller, each on a fresh inventory, and checks the status; a
// refused request must leave the database as it was. Host-scoping (gpu-1's
// token on gpu-2's things) is TestHostScope's.
func TestRoleMatrix(t *testing.T) {
	type want = struct{ viewer, host, admin int }
	const ok, no, nf, na, conflict = http.StatusOK, http.StatusForbidden, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusConflict
	routes := []matrixRoute{
		{"GET", "/hosts", "", want{ok, ok, ok}},
		{"GET", "/hosts/GPU1", "", want{ok, ok, ok}},
		{"POST", "/hosts", `{"host":{"name":"gpu-1"}}`, want{no, conflict, conflict}},
		{"PUT", "/hosts/GPU1", `{"host":{"access_ip":"10.9.9.9"}}`, want{no, ok, ok}},
		{"DELETE", "/hosts/SPARE", "", want{no, no, ok}},
		{"GET", "/isolated_devices", "", want{ok, ok, ok}},
		{"GET", "/isolated_devices/FREE", "", want{ok, ok, ok}},
		{"POST", "/isolated_devices", deviceJSON("GPU1", "00:07.0-0"), want{no, ok, ok}},
		{"POST", "/isolated_devices", bulkJSON(deviceJSON("GPU1", "00:07.0-0"), deviceJSON("GPU1", "00:07.0-1")), want{no, ok, ok}},
		{"PUT", "/isolated_devices/FREE", `{"isolated_device":{"model":"Tesla P40 (renamed)"}}`, want{no, ok, ok}},
		{"DELETE", "/isolated_devices/FREE", "", want{no, ok, ok}},
		{"POST", "/isolated_devices/FREE/purge", "", want{no, ok, ok}},
		{"POST", "/isolated_devices/HELD/purge", `{"force":true}`, want{no, no, ok}},
		{"POST", "/servers/guest-2/attach-isolated-device", `{"device":"FREE"}`, want{no, no, ok}},
		{"POST", "/servers/guest-1/detach-isolated-device", `{"all":true}`, want{no, no, ok}},
		{"GET", "/metrics", "", want{ok, ok, ok}},
		{"GET", "/nothing", "", want{nf, nf, nf}},
		{"DELETE", "/hosts", "", want{na, na, na}},
		{"GET", "/zones/default", "", want{ok, ok, ok}},
		{"GET", "/networks?ip=10.0.0.1", "", want{ok, ok, ok}},
		{"POST", "/zones/default/hosts", `{"host":{"generate_name":"gpu-1"}}`, want{no, conflict, conflict}},
		{"GET", "/v3/auth/tokens", "", want{http.StatusNotFound, http.StatusNotFound, http.StatusNotFound}},
		{"GET", "/v3/projects", "", want{nf, nf, nf}},
	}
	roles := []string{"none", "invalid", "viewer", "host", "admin"}
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) { testRoleMatrix(t, b, routes, roles) })
	}
}

type matrixRoute struct {
	method, path, body string // FREE, HELD, GPU1 and SPARE are replaced by ids
	want               struct{ viewer, host, admin int }
}

func testRoleMatrix(t *testing.T, b storetest.Backend, routes []matrixRoute, roles []string) {
	for _, rt := range routes {
		wantFor := map[string]int{"none": 401, "invalid": 401, "viewer": rt.want.viewer, "host": rt.want.host, "admin": rt.want.admin}
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			// One inventory for the route, a fresh one after a request
			// that changes it (not a refusal, not a read).
			fixtures := map[string]*scopeFixture{}
			var f *scopeFixture
			for _, role := range roles {
				if f == nil {
					f = newScopeFixture(t, storetest.Open(t, b.DSN(t)))
				}
				fixtures[role] = f
				if w := wantFor[role]; rt.method != "GET" && w != http.StatusUnauthorized && w != http.StatusForbidden {
					f = nil
				}
			}
			for _, role := range roles {
				t.Run("as "+role, func(t *testing.T) {
					f := fixtures[role]
					f.env.t = t
					ids := strings.NewReplacer("FREE", f.free.ID, "HELD", f.held.ID, "GPU1", f.gpu1.ID, "SPARE", f.spare.ID)
					path, body := ids.Replace(rt.path), ids.Replace(rt.body)
					status, ae := f.as(role, rt.method, path, body)
					if status != wantFor[role] {
						t.Fatalf("status %d %+v, want %d", status, ae, wantFor[role])
					}
					switch {
					case status == http.StatusUnauthorized && ae.Class != api.ClassUnauthorized,
						status == http.StatusForbidden && ae.Class != api.ClassForbidden:
						t.Errorf("class %q for %d", ae.Class, status)
					case status == http.StatusForbidden && (role != "host" || !strings.Contains(rt.body, "force")):
						// A refusal by role names the role and the request.
						if w := fmt.Sprintf("role %s may not %s %s", role, rt.method, path); ae.Details != w {
							t.Errorf("details %q, want %q", ae.Details, w)
						}
					case status == http.StatusForbidden:
						if !strings.Contains(ae.Details, "may not force a purge") {
							t.Errorf("details %q, want the force purge named", ae.Details)
						}
					}
				})
			}
		})
	}
}

// Every route of the policy table exists (a typo in a pattern would leave
// the real route admin-only and the entry dead).
func TestPolicyNamesRealRoutes(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		for pattern := range routePolicy() {
			method, path, ok := strings.Cut(pattern, " ")
			if !ok {
				continue // "/": the no-route handler itself
			}
			path = strings.NewReplacer("{id}", "0b5e5b4e-5d5c-4d6a-9b1a-0c1d2e3f4a5b", "{guest}", "guest-1", "{zone}", "default").Replace(path)
			status, body := e.call(method, path, "")
			if status == http.StatusNotFound && strings.Contains(string(body), "mps-inventory has no") || status == http.StatusMethodNotAllowed {
				t.Errorf("policy entry %q matches no route: %s", pattern, body)
			}
		}
	})
}
