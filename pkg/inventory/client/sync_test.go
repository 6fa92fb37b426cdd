package client

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/devsync"
	"yunion.io/x/mps-daemon/pkg/inventory/server"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// inventory is a real mps-inventory (server over a SQLite file or a
// PostgreSQL database, see storetest.ForEachBackend) on loopback.
type inventory struct {
	st  *store.Store
	url string
	// token is an admin token of this inventory.
	token string
}

// newInventory starts one over st; wrap, when set, sits in front of the API
// (to inject failures or races).
func newInventory(t *testing.T, st *store.Store, opts server.Options, wrap func(next http.Handler) http.Handler) *inventory {
	t.Helper()
	token, _, err := st.CreateToken(t.Context(), store.NewToken{Name: "client tests", Role: store.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = server.New(st, opts, nil)
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &inventory{st: st, url: srv.URL, token: token}
}

// newClient is a client of inv with its admin token and default options.
func (inv *inventory) newClient() *Client { return New(Options{URL: inv.url, Token: inv.token}) }

// newInventoryWithHost is newInventory over st, with nothing in front, a
// client of it and host "gpu-1" registered through that client.
func newInventoryWithHost(t *testing.T, st *store.Store) (*inventory, *Client, api.Host) {
	t.Helper()
	inv := newInventory(t, st, server.Options{}, nil)
	c := inv.newClient()
	h, err := c.EnsureHost(t.Context(), "gpu-1")
	if err != nil {
		t.Fatal(err)
	}
	return inv, c, h
}

// gpuSlices is what the agent wants for one GPU split in n.
func gpuSlices(bus string, n int) []api.IsolatedDevice {
	const totalMiB = 24576
	var out []api.IsolatedDevice
	for i := range n {
		out = append(out, api.IsolatedDevice{
			Name: fmt.Sprintf("mps-%s-%d", bus, i), Model: "Tesla P40",
			Addr: fmt.Sprintf("%s:00.0-%d", bus, i), VendorDeviceID: "10de:1b38",
			DevicePath: "GPU-" + bus, NumaNode: 0,
			PCIEInfo: &api.PCIEInfo{LaneWidth: 16, Throughput: "15.76 GB/s", TransferRatePerLane: "8GT/s", Version: "3.0"},
			Index:    -1, DeviceMinor: -1,
			MPSMemoryLimit: totalMiB / n, MPSMemoryTotal: totalMiB, MPSThreadPercentage: 100 / n,
		})
	}
	return out
}

// rows lists a host's devices of every type, keyed by addr.
func rows(t *testing.T, c *Client, hostID string) map[string]api.IsolatedDevice {
	t.Helper()
	list, err := c.ListIsolatedDevices(t.Context(), ListOptions{HostID: hostID, Limit: 2048})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]api.IsolatedDevice{}
	for _, d := range list.IsolatedDevices {
		m[d.DevType+" "+d.Addr] = d
	}
	return m
}

func mustSync(t *testing.T, c *Client, hostID string, want []api.IsolatedDevice, expect devsync.Result) {
	t.Helper()
	got, err := c.SyncDevices(t.Context(), hostID, want)
	if err != nil {
		t.Fatalf("SyncDevices: %v (did %+v)", err, got)
	}
	devices := got.Devices
	got.Devices = nil
	if !reflect.DeepEqual(got, expect) {
		t.Fatalf("SyncDevices = %+v, want %+v", got, expect)
	}
	// Devices is the host's MPS rows as the inventory now holds them.
	summary := func(d api.IsolatedDevice) string {
		return fmt.Sprintf("%s %s guest=%q pending=%v limit=%d", d.ID, d.Addr, d.GuestID, d.PendingRemoval, d.MPSMemoryLimit)
	}
	var fromSync, listed []string
	for _, d := range devices {
		fromSync = append(fromSync, summary(d))
	}
	for _, d := range rows(t, c, hostID) {
		if d.DevType == api.DevTypeNvidiaMPS {
			listed = append(listed, summary(d))
		}
	}
	slices.Sort(fromSync)
	slices.Sort(listed)
	if !slices.Equal(fromSync, listed) {
		t.Fatalf("devsync.Result.Devices\n%v\nbut the inventory holds\n%v", fromSync, listed)
	}
}

func TestSyncDevices(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		ctx := t.Context()
		_, c, h := newInventoryWithHost(t, open())
		if again, err := c.EnsureHost(ctx, "gpu-1"); err != nil || again.ID != h.ID {
			t.Fatalf("second EnsureHost = %+v, %v; want host %s", again, err, h.ID)
		}
		other, _ := c.EnsureHost(ctx, "gpu-2")

		// Rows the sync must never touch: another dev_type on this host (same
		// GPU address even) and MPS rows of another host.
		share := gpuSlices("06", 1)[0]
		share.HostID, share.DevType, share.VendorDeviceID = h.ID, "NVIDIA_GPU_SHARE", "10de:ffff"
		if _, err := c.CreateIsolatedDevice(ctx, share); err != nil {
			t.Fatal(err)
		}
		mustSync(t, c, other.ID, gpuSlices("06", 2), devsync.Result{Created: 2})
		untouched := func() {
			t.Helper()
			if r := rows(t, c, h.ID); r["NVIDIA_GPU_SHARE 06:00.0-0"].ID == "" {
				t.Errorf("the NVIDIA_GPU_SHARE row is gone")
			}
			if r := rows(t, c, other.ID); len(r) != 2 {
				t.Errorf("other host has %d rows, want its 2", len(r))
			}
		}

		// First sync creates, in the order given.
		want := append(gpuSlices("06", 4), gpuSlices("1a", 2)...)
		mustSync(t, c, h.ID, want, devsync.Result{Created: 6})
		list, _ := c.ListIsolatedDevices(ctx, ListOptions{HostID: h.ID, DevType: api.DevTypeNvidiaMPS, Order: "asc"})
		var order []string
		for _, d := range list.IsolatedDevices {
			order = append(order, d.Addr)
		}
		if fmt.Sprint(order) != "[06:00.0-0 06:00.0-1 06:00.0-2 06:00.0-3 1a:00.0-0 1a:00.0-1]" {
			t.Errorf("rows in order %v", order)
		}
		first := rows(t, c, h.ID)

		// Second sync with the same set: nothing written.
		mustSync(t, c, h.ID, want, devsync.Result{Unchanged: 6})
		if again := rows(t, c, h.ID); !reflect.DeepEqual(again, first) {
			t.Errorf("an idempotent sync changed rows")
		}

		// GPU 06 goes from 4 slices to 2 while a guest holds slice 3; GPU 1a
		// loses its PCIe info.
		held := first["NVIDIA_MPS 06:00.0-3"]
		held.GuestID = "guest-1"
		if _, err := c.UpdateIsolatedDevice(ctx, held.ID, held); err != nil {
			t.Fatal(err)
		}
		want = append(gpuSlices("06", 2), gpuSlices("1a", 2)...)
		want[3].PCIEInfo = nil
		mustSync(t, c, h.ID, want, devsync.Result{Updated: 3, Unchanged: 1, Deleted: 1, Held: []string{held.ID}})
		r := rows(t, c, h.ID)
		if got := r["NVIDIA_MPS 06:00.0-0"]; got.MPSMemoryLimit != 12288 || got.MPSThreadPercentage != 50 || got.ID != first["NVIDIA_MPS 06:00.0-0"].ID {
			t.Errorf("slice 0 after the change: %+v; want the same row with limit 12288, 50%%", got)
		}
		if got := r["NVIDIA_MPS 1a:00.0-1"]; got.PCIEInfo != nil {
			t.Errorf("pcie_info not cleared: %+v", got.PCIEInfo)
		}
		if _, ok := r["NVIDIA_MPS 06:00.0-2"]; ok {
			t.Errorf("free slice 2 not deleted")
		}
		if got := r["NVIDIA_MPS 06:00.0-3"]; got.GuestID != "guest-1" {
			t.Errorf("held slice 3: %+v; want kept with its guest", got)
		}
		untouched()

		// The held row is reported again until released, then deleted.
		mustSync(t, c, h.ID, want, devsync.Result{Unchanged: 4, Held: []string{held.ID}})
		held.GuestID = ""
		if _, err := c.UpdateIsolatedDevice(ctx, held.ID, held); err != nil {
			t.Fatal(err)
		}
		mustSync(t, c, h.ID, want, devsync.Result{Unchanged: 4, Deleted: 1})
		untouched()

		// An empty desired set removes every MPS row of the host, and only those.
		mustSync(t, c, h.ID, nil, devsync.Result{Deleted: 4})
		if r := rows(t, c, h.ID); len(r) != 1 {
			t.Errorf("rows left: %v, want only the NVIDIA_GPU_SHARE one", r)
		}
		untouched()
	})
}

// The host's rows are read page by page: rows past the first page are
// matched too, not created twice or left behind. Pages are walked by
// marker, or by offset from an inventory that does not know markers (one
// of before marker paging, which ignores paging_marker).
func TestSyncPagesThroughAllRows(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		st := open()
		for _, tt := range []struct {
			name, host string
			oldServer  bool
		}{{"by marker", "gpu-1", false}, {"by offset", "gpu-2", true}} {
			t.Run(tt.name, func(t *testing.T) {
				var markers, offsets atomic.Int32
				inv := newInventory(t, st, server.Options{}, func(next http.Handler) http.Handler {
					return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						q := r.URL.Query()
						if tt.oldServer {
							q.Del("paging_marker")
							r.URL.RawQuery = q.Encode()
						}
						if q.Has("paging_marker") {
							markers.Add(1)
						}
						if q.Has("offset") {
							offsets.Add(1)
						}
						next.ServeHTTP(w, r)
					})
				})
				c := inv.newClient()
				c.pageSize = 3
				h, err := c.EnsureHost(t.Context(), tt.host)
				if err != nil {
					t.Fatal(err)
				}
				want := append(gpuSlices("06", 5), gpuSlices("07", 5)...)
				mustSync(t, c, h.ID, want, devsync.Result{Created: 10})
				mustSync(t, c, h.ID, want, devsync.Result{Unchanged: 10})
				mustSync(t, c, h.ID, want[:4], devsync.Result{Unchanged: 4, Deleted: 6})
				// Three syncs: 1 + 4 + 4 pages of 3 rows.
				if got := [2]int32{markers.Load(), offsets.Load()}; (!tt.oldServer && got != [2]int32{9, 0}) ||
					(tt.oldServer && got != [2]int32{0, 6}) {
					t.Errorf("%d requests by marker, %d by offset", got[0], got[1])
				}
			})
		}
	})
}

// A create that loses a race (409: the row appeared since the list) adopts
// the row instead of failing the sync.
func TestSyncAdoptsRowCreatedConcurrently(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		var inv *inventory
		var once sync.Once
		inv = newInventory(t, open(), server.Options{}, func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == "POST" && r.URL.Path == "/isolated_devices" {
					once.Do(func() {
						// Another agent's sync wins the race, with stale fields.
						d := gpuSlices("06", 1)[0]
						d.HostID, d.DevType, d.MPSMemoryLimit = "gpu-1", api.DevTypeNvidiaMPS, 1
						if _, err := inv.st.CreateDevice(r.Context(), d); err != nil {
							t.Errorf("racing create: %v", err)
						}
					})
				}
				next.ServeHTTP(w, r)
			})
		})
		c := inv.newClient()
		h, err := c.EnsureHost(t.Context(), "gpu-1")
		if err != nil {
			t.Fatal(err)
		}
		want := gpuSlices("06", 2)
		want[0].MPSMemoryLimit = 12288
		mustSync(t, c, h.ID, want, devsync.Result{Created: 1, Updated: 1})
		mustSync(t, c, h.ID, want, devsync.Result{Unchanged: 2})
	})
}

// Two agents syncing one host at once end with exactly the desired rows.
func TestConcurrentSyncs(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		inv, c, h := newInventoryWithHost(t, open())
		want := gpuSlices("06", 8)
		var wg sync.WaitGroup
		results := make([]devsync.Result, 4)
		for i := range results {
			wg.Go(func() {
				var err error
				if results[i], err = inv.newClient().SyncDevices(t.Context(), h.ID, want); err != nil {
					t.Errorf("sync %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		created := 0
		for _, r := range results {
			created += r.Created
		}
		r := rows(t, c, h.ID)
		if created != 8 || len(r) != 8 {
			t.Errorf("%d creates in all, %d rows; want 8 and 8 (results %+v)", created, len(r), results)
		}
		mustSync(t, c, h.ID, want, devsync.Result{Unchanged: 8})
	})
}

func TestSyncRefusesBadDesiredSets(t *testing.T) {
	c := New(Options{URL: "http://127.0.0.1:1"}) // never reached
	dup := gpuSlices("06", 2)
	dup[1].Addr = dup[0].Addr
	otherType := gpuSlices("06", 1)
	otherType[0].DevType = "NVIDIA_GPU_SHARE"
	otherHost := gpuSlices("06", 1)
	otherHost[0].HostID = "h2"
	noKey := gpuSlices("06", 1)
	noKey[0].VendorDeviceID = ""
	tests := []struct {
		name    string
		hostID  string
		desired []api.IsolatedDevice
	}{
		{"duplicate key", "h1", dup},
		{"other dev_type", "h1", otherType},
		{"other host", "h1", otherHost},
		{"no key", "h1", noKey},
		{"no host", "", gpuSlices("06", 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := c.SyncDevices(t.Context(), tt.hostID, tt.desired)
			if err == nil || !strings.HasPrefix(err.Error(), "syncing devices: ") || !reflect.DeepEqual(res, devsync.Result{}) {
				t.Errorf("SyncDevices = %+v, %v; want an error before any call", res, err)
			}
		})
	}
}
