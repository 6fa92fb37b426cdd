package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/devsync"
	"yunion.io/x/mps-daemon/pkg/inventory/server"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// creates counts the device creates an inventory is sent: bulk (a body
// with isolated_devices) and single.
type creates struct{ bulk, single atomic.Int32 }

func (n *creates) String() string {
	return fmt.Sprintf("%d bulk, %d single", n.bulk.Load(), n.single.Load())
}

// counting is a wrap of newInventory that counts creates into n; older,
// when set, answers a bulk create as an inventory without it does.
func counting(n *creates, older func(w http.ResponseWriter, r *http.Request, body []byte, next http.Handler)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != "POST" || r.URL.Path != "/isolated_devices" {
				next.ServeHTTP(w, r)
				return
			}
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			if !bytes.Contains(body, []byte(`"isolated_devices"`)) {
				n.single.Add(1)
				next.ServeHTTP(w, r)
				return
			}
			n.bulk.Add(1)
			if older != nil {
				older(w, r, body, next)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// The answers of inventories without the bulk create.
var olderInventories = map[string]func(w http.ResponseWriter, r *http.Request, body []byte, next http.Handler){
	// mps-inventory before the bulk create reads the body as a single
	// create: the real server answers a body without isolated_device (the
	// key renamed here so that it does not see the list).
	"mps-inventory before bulk create": func(w http.ResponseWriter, r *http.Request, body []byte, next http.Handler) {
		body = bytes.Replace(body, []byte(`"isolated_devices"`), []byte(`"isolated_devices_unknown"`), 1)
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		next.ServeHTTP(w, r)
	},
	"405": func(w http.ResponseWriter, _ *http.Request, _ []byte, _ http.Handler) {
		writeAPIError(w, http.StatusMethodNotAllowed, api.ClassMethodNotAllowed, "POST is not served")
	},
	"404 without a route": func(w http.ResponseWriter, _ *http.Request, _ []byte, _ http.Handler) {
		writeAPIError(w, http.StatusNotFound, api.ClassHandlerNotFound, "no POST /isolated_devices")
	},
}

func writeAPIError(w http.ResponseWriter, status int, class, details string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(api.Error{Code: status, Class: class, Details: details})
}

// withHost is gpuSlices' devices of host hostID, as a sync sends them.
func withHost(hostID string, devs []api.IsolatedDevice) []api.IsolatedDevice {
	for i := range devs {
		devs[i].HostID, devs[i].DevType = hostID, api.DevTypeNvidiaMPS
	}
	return devs
}

// checkCreated checks that created are devs, in devs' order, as the
// inventory lists them (oldest first).
func checkCreated(t *testing.T, c *Client, hostID string, devs, created []api.IsolatedDevice) {
	t.Helper()
	list, err := c.ListIsolatedDevices(t.Context(), ListOptions{HostID: hostID, Order: "asc", Limit: 2048})
	if err != nil {
		t.Fatal(err)
	}
	if len(created) != len(devs) || len(list.IsolatedDevices) != len(devs) {
		t.Fatalf("created %d, listed %d, want %d", len(created), len(list.IsolatedDevices), len(devs))
	}
	for i, d := range list.IsolatedDevices {
		if d.Addr != devs[i].Addr || created[i].Addr != d.Addr || created[i].ID != d.ID {
			t.Errorf("row %d: listed %s %s, created %s %s, want %s", i, d.Addr, d.ID, created[i].Addr, created[i].ID, devs[i].Addr)
		}
	}
}

func TestCreateIsolatedDevices(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		var n creates
		inv := newInventory(t, open(), server.Options{}, counting(&n, nil))
		c := inv.newClient()
		h, err := c.EnsureHost(t.Context(), "gpu-1")
		if err != nil {
			t.Fatal(err)
		}
		devs := withHost(h.ID, append(gpuSlices("1a", 3), gpuSlices("06", 2)...))
		created, err := c.CreateIsolatedDevices(t.Context(), devs)
		if err != nil {
			t.Fatal(err)
		}
		checkCreated(t, c, h.ID, devs, created)
		if got, err := c.GetIsolatedDevice(t.Context(), created[0].ID); err != nil || !reflect.DeepEqual(got, created[0]) {
			t.Errorf("read back %+v, %v\nwant %+v", got, err, created[0])
		}
		if n.bulk.Load() != 1 || n.single.Load() != 0 {
			t.Errorf("%v creates, want 1 bulk", &n)
		}

		// A refused row refuses all, named; it is not taken for an older
		// inventory.
		bad := withHost(h.ID, gpuSlices("07", 2))
		bad[1].Model = strings.Repeat("x", api.MaxModelBytes+1)
		created, err = c.CreateIsolatedDevices(t.Context(), bad)
		if !strings.Contains(fmt.Sprint(err), "isolated_devices[1]: field model") || len(created) != 0 {
			t.Errorf("bad row: %d created, %v", len(created), err)
		}
		created, err = c.CreateIsolatedDevices(t.Context(), withHost(h.ID, append(gpuSlices("07", 1), gpuSlices("06", 1)...)))
		if !IsConflict(err) || len(created) != 0 {
			t.Errorf("existing row: %d created, %v; want a 409", len(created), err)
		}
		if n.bulk.Load() != 3 || n.single.Load() != 0 {
			t.Errorf("%v creates, want 3 bulk", &n)
		}
		if list, _ := c.ListIsolatedDevices(t.Context(), ListOptions{HostID: h.ID}); list.Total != 5 {
			t.Errorf("%d rows after the refusals, want 5", list.Total)
		}
	})
}

// More than api.MaxCreateDevices go in several requests.
func TestCreateIsolatedDevicesOverTheCap(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		var n creates
		inv := newInventory(t, open(), server.Options{}, counting(&n, nil))
		c := inv.newClient()
		h, err := c.EnsureHost(t.Context(), "gpu-1")
		if err != nil {
			t.Fatal(err)
		}
		var devs []api.IsolatedDevice
		for gpu := range api.MaxCreateDevices/16 + 1 {
			devs = append(devs, gpuSlices(fmt.Sprintf("%02x", gpu), 16)...)
		}
		created, err := c.CreateIsolatedDevices(t.Context(), withHost(h.ID, devs))
		if err != nil {
			t.Fatal(err)
		}
		checkCreated(t, c, h.ID, devs, created)
		if n.bulk.Load() != 2 {
			t.Errorf("%v creates for %d devices, want 2 bulk", &n, len(devs))
		}
	})
}

// An inventory without the bulk create gets the devices one by one, and
// is not sent another bulk create by the same client; a sync against it
// keeps its order and results.
func TestCreateIsolatedDevicesFromAnOlderInventory(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		st := open()
		i := 0
		for name, older := range olderInventories {
			i++
			t.Run(name, func(t *testing.T) {
				var n creates
				inv := newInventory(t, st, server.Options{}, counting(&n, older))
				c := inv.newClient()
				h, err := c.EnsureHost(t.Context(), fmt.Sprintf("gpu-%d", i))
				if err != nil {
					t.Fatal(err)
				}
				devs := withHost(h.ID, gpuSlices("1a", 3))
				created, err := c.CreateIsolatedDevices(t.Context(), devs)
				if err != nil {
					t.Fatal(err)
				}
				checkCreated(t, c, h.ID, devs, created)
				if n.bulk.Load() != 1 || n.single.Load() != 3 {
					t.Errorf("%v creates, want 1 bulk then 3 single", &n)
				}

				// The sync, through the same client: one by one at once.
				want := append(gpuSlices("1a", 3), gpuSlices("06", 2)...)
				mustSync(t, c, h.ID, want, devsync.Result{Created: 2, Unchanged: 3})
				checkCreated(t, c, h.ID, withHost(h.ID, want), rowsInOrder(t, c, h.ID))
				if n.bulk.Load() != 1 || n.single.Load() != 5 {
					t.Errorf("%v creates, want 1 bulk then 5 single", &n)
				}

				// A new client (a restarted daemon) tries once, then goes one by one.
				c2 := inv.newClient()
				mustSync(t, c2, h.ID, append(want, gpuSlices("07", 2)...), devsync.Result{Created: 2, Unchanged: 5})
				if n.bulk.Load() != 2 || n.single.Load() != 7 {
					t.Errorf("%v creates, want 2 bulk then 7 single", &n)
				}
			})
		}
	})
}

// rowsInOrder lists the host's rows oldest first.
func rowsInOrder(t *testing.T, c *Client, hostID string) []api.IsolatedDevice {
	t.Helper()
	list, err := c.ListIsolatedDevices(t.Context(), ListOptions{HostID: hostID, Order: "asc", Limit: 2048})
	if err != nil {
		t.Fatal(err)
	}
	return list.IsolatedDevices
}

// The first sync of a host creates its devices in one request, in the
// order given.
func TestSyncCreatesInOneRequest(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		var n creates
		inv := newInventory(t, open(), server.Options{}, counting(&n, nil))
		c := inv.newClient()
		h, err := c.EnsureHost(t.Context(), "gpu-1")
		if err != nil {
			t.Fatal(err)
		}
		want := append(gpuSlices("1a", 4), gpuSlices("06", 4)...)
		mustSync(t, c, h.ID, want, devsync.Result{Created: 8})
		checkCreated(t, c, h.ID, withHost(h.ID, want), rowsInOrder(t, c, h.ID))
		// Two more slices of 06 and one of 1a gone: one request for the two.
		want = append(gpuSlices("1a", 3), gpuSlices("06", 6)...)
		mustSync(t, c, h.ID, want, devsync.Result{Created: 2, Updated: 7, Deleted: 1})
		if n.bulk.Load() != 2 || n.single.Load() != 0 {
			t.Errorf("%v creates, want 2 bulk", &n)
		}
	})
}
