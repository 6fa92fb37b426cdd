package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/client"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// TestHostScope: gpu-1's host token reads everything but writes only gpu-1
// and gpu-1's devices, and never attaches or detaches. Every refusal is a
// 403 that names what was refused and changes nothing.
func TestHostScope(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		f := newScopeFixture(t, open())
		echo := func(d api.IsolatedDevice, change func(*api.IsolatedDevice)) string {
			change(&d)
			b, _ := json.Marshal(api.IsolatedDeviceBody{IsolatedDevice: d})
			return string(b)
		}
		dev := func(fields string) string {
			return `{"isolated_device":{"dev_type":"NVIDIA_MPS","addr":"00:09.0-0","vendor_device_id":"10de:1b38",` + fields + `}}`
		}
		const no = http.StatusForbidden
		tests := []struct {
			name, method, path, body string
			status                   int
			details                  string
		}{
			{"register another host", "POST", "/hosts", `{"host":{"name":"gpu-2"}}`, no, "token for host gpu-1 may not register host gpu-2"},
			{"register a new host of another name", "POST", "/hosts", `{"host":{"name":"gpu-9"}}`, no, "may not register host gpu-9"},
			{"register a host without name", "POST", "/hosts", `{"host":{}}`, no, "may not register host"},
			{"create on another host by id", "POST", "/isolated_devices", dev(`"host_id":"` + f.gpu2.ID + `"`), no,
				"token for host gpu-1 may not create isolated devices of host " + f.gpu2.ID},
			{"create on another host by name", "POST", "/isolated_devices", dev(`"host_id":"gpu-2"`), no, "may not create isolated devices of host gpu-2"},
			{"create on an unknown host", "POST", "/isolated_devices", dev(`"host_id":"gpu-9"`), no, "may not create isolated devices of host gpu-9"},
			{"create attached", "POST", "/isolated_devices", dev(`"host_id":"gpu-1","guest_id":"guest-9"`), no, "may not set guest_id"},
			// A bulk create is checked row by row; a refusal names the row.
			{"bulk create with a row of another host", "POST", "/isolated_devices",
				bulkJSON(deviceJSON("gpu-1", "00:09.0-0"), deviceJSON(f.gpu2.ID, "00:09.0-1")), no,
				"isolated_devices[1]: token for host gpu-1 may not create isolated devices of host " + f.gpu2.ID},
			{"bulk create with a row attached", "POST", "/isolated_devices",
				bulkJSON(deviceJSON("gpu-1", "00:09.0-0"), dev(`"host_id":"gpu-1","guest_id":"guest-9"`)), no,
				"isolated_devices[1]: token for host gpu-1 may not set guest_id"},
			{"change another host's device", "PUT", "/isolated_devices/" + f.other.ID, `{"isolated_device":{"model":"x"}}`, no,
				"token for host gpu-1 may not PUT /isolated_devices/" + f.other.ID + ": the device belongs to host " + f.gpu2.ID},
			{"move an own device away", "PUT", "/isolated_devices/" + f.free.ID, echo(f.free, func(d *api.IsolatedDevice) { d.HostID = f.gpu2.ID }), no,
				"may not move isolated device " + f.free.ID + " to host " + f.gpu2.ID},
			{"attach through PUT", "PUT", "/isolated_devices/" + f.free.ID, `{"isolated_device":{"guest_id":"guest-9"}}`, no, "may not change guest_id"},
			{"detach through PUT", "PUT", "/isolated_devices/" + f.held.ID, echo(f.held, func(d *api.IsolatedDevice) { d.GuestID = "" }), no, "may not change guest_id"},
			{"delete another host's device", "DELETE", "/isolated_devices/" + f.other.ID, "", no, "the device belongs to host " + f.gpu2.ID},
			{"purge another host's device", "POST", "/isolated_devices/" + f.other.ID + "/purge", "", no, "the device belongs to host " + f.gpu2.ID},
			{"force purge an own device", "POST", "/isolated_devices/" + f.held.ID + "/purge", `{"force":true}`, no, "role host may not force a purge"},
			{"attach", "POST", "/servers/guest-9/attach-isolated-device", `{"device":"` + f.free.ID + `"}`, no, "role host may not POST /servers/guest-9/attach-isolated-device"},
			{"detach", "POST", "/servers/guest-1/detach-isolated-device", `{"all":true}`, no, "role host may not POST"},
			{"rename own host", "PUT", "/hosts/gpu-1", `{"host":{"name":"gpu-one"}}`, no, "token for host gpu-1 may not rename its host"},
			{"update another host", "PUT", "/hosts/" + f.gpu2.ID, `{"host":{"access_ip":"10.9.9.9"}}`, no, "token for host gpu-1 may not update host " + f.gpu2.ID},
			{"delete an unknown device", "DELETE", "/isolated_devices/" + unknownUUID, "", http.StatusNotFound, "not found"},
			{"delete a held own device", "DELETE", "/isolated_devices/" + f.held.ID, "", http.StatusNotAcceptable, api.MsgDeviceUsedByServer},

			// What the agent does for its own host is allowed.
			{"send back an own device as read", "PUT", "/isolated_devices/" + f.held.ID, echo(f.held, func(d *api.IsolatedDevice) { d.Model = "renamed" }), http.StatusOK, ""},
			{"create on the own host by name", "POST", "/isolated_devices", dev(`"host_id":"gpu-1"`), http.StatusOK, ""},
			{"bulk create on the own host by name and id", "POST", "/isolated_devices",
				bulkJSON(deviceJSON("gpu-1", "00:0a.0-0"), deviceJSON(f.gpu1.ID, "00:0a.0-1")), http.StatusOK, ""},
			{"delete an own device", "DELETE", "/isolated_devices/" + f.free.ID, "", http.StatusOK, ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				f.env.t = t
				status, ae := f.as("host", tt.method, tt.path, tt.body)
				if status != tt.status || !strings.Contains(ae.Details, tt.details) {
					t.Errorf("%d %+v, want %d with details containing %q", status, ae, tt.status, tt.details)
				}
				if status == http.StatusForbidden && ae.Class != api.ClassForbidden {
					t.Errorf("class %q, want %s", ae.Class, api.ClassForbidden)
				}
			})
		}
	})
}

// A host token may register its host once the host is named; before that
// it cannot create devices for it.
func TestHostTokenOfUnregisteredHost(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		f := newScopeFixture(t, open())
		whole, _, err := f.st.CreateToken(t.Context(), store.NewToken{Role: store.RoleHost, Host: "gpu-new"})
		if err != nil {
			t.Fatal(err)
		}
		f.tokens["new"] = "Bearer " + whole
		body := deviceJSON("gpu-new", "00:06.0-0")
		if status, ae := f.as("new", "POST", "/isolated_devices", body); status != http.StatusForbidden ||
			!strings.Contains(ae.Details, "host gpu-new is not registered yet") {
			t.Errorf("device before registering: %d %+v, want 403 naming the unregistered host", status, ae)
		}
		if status, ae := f.as("new", "POST", "/hosts", `{"host":{"name":"gpu-new"}}`); status != http.StatusOK {
			t.Fatalf("registering its own host: %d %+v", status, ae)
		}
		if status, ae := f.as("new", "POST", "/isolated_devices", body); status != http.StatusOK {
			t.Errorf("device after registering: %d %+v", status, ae)
		}
	})
}

// The agent's own calls (client.EnsureHost, client.SyncDevices) work with a
// host token for its host, and its sync of another host's id is refused.
func TestHostTokenDrivesTheAgentClient(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		f := newScopeFixture(t, open())
		ctx := t.Context()
		whole, _, err := f.st.CreateToken(ctx, store.NewToken{Name: "agent", Role: store.RoleHost, Host: "gpu-3"})
		if err != nil {
			t.Fatal(err)
		}
		c := client.New(client.Options{URL: f.srv.URL, Token: whole, Retries: -1})
		h, err := c.EnsureHost(ctx, "gpu-3")
		if err != nil {
			t.Fatalf("EnsureHost: %v", err)
		}
		want := []api.IsolatedDevice{{
			DevType: api.DevTypeNvidiaMPS, Model: "Tesla P40", Addr: "00:06.0-0", VendorDeviceID: "10de:1b38",
			NumaNode: -1, Index: -1, DeviceMinor: -1, MPSMemoryLimit: 24576, MPSMemoryTotal: 24576, MPSThreadPercentage: 100,
		}}
		if _, err := c.SyncDevices(ctx, h.ID, want); err != nil {
			t.Fatalf("SyncDevices of its own host: %v", err)
		}
		if _, err := c.EnsureHost(ctx, "gpu-1"); err != nil {
			t.Errorf("EnsureHost of an existing other host only reads: %v", err)
		}
		if _, err := c.EnsureHost(ctx, "gpu-4"); !isStatus(err, http.StatusForbidden) {
			t.Errorf("EnsureHost of a new other host: %v, want 403", err)
		}
		before := f.snapshot()
		if _, err := c.SyncDevices(ctx, f.gpu2.ID, want); !isStatus(err, http.StatusForbidden) {
			t.Errorf("SyncDevices of gpu-2: %v, want 403", err)
		}
		if f.snapshot() != before {
			t.Errorf("a refused sync changed the database")
		}
	})
}

func isStatus(err error, status int) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Status == status
}
