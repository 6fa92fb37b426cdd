package client

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/devsync"
	"yunion.io/x/mps-daemon/pkg/inventory/server"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// requestLog counts the requests that reach the inventory.
type requestLog struct {
	mu   sync.Mutex
	reqs []string // "METHOD path", "+v" when it carried devices_version
}

func (l *requestLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		line := r.Method + " " + r.URL.Path
		if r.URL.Query().Has(api.ParamDevicesVersion) {
			line += " +v"
		}
		l.mu.Lock()
		l.reqs = append(l.reqs, line)
		l.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

// since returns the requests logged since the last call.
func (l *requestLog) since() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.reqs
	l.reqs = nil
	return out
}

// syncs runs a sync and checks its result and the requests it made.
type syncs struct {
	t      *testing.T
	c      *Client
	hostID string
	log    *requestLog
}

func (s syncs) run(want []api.IsolatedDevice, expect devsync.Result, requests ...string) devsync.Result {
	s.t.Helper()
	s.log.since()
	got, err := s.c.SyncDevices(s.t.Context(), s.hostID, want)
	if err != nil {
		s.t.Fatalf("SyncDevices: %v", err)
	}
	reqs := s.log.since()
	if strings.Join(reqs, ", ") != strings.Join(requests, ", ") {
		s.t.Errorf("the sync sent %q, want %q", reqs, requests)
	}
	devs := got.Devices
	got.Devices = nil
	if !equalResults(got, expect) {
		s.t.Errorf("SyncDevices = %+v, want %+v", got, expect)
	}
	got.Devices = devs
	return got
}

func equalResults(a, b devsync.Result) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

const (
	list        = "GET /isolated_devices"
	listIfSame  = "GET /isolated_devices +v"
	bulkCreate  = "POST /isolated_devices"
	deviceWrite = "PUT /isolated_devices/"
)

// A sync with the same desired rows as the client's last one is one
// request while nothing changed, and answers the rows as they are; any
// change of the host's rows since, by anyone (an API write, a guest's
// attach and detach, an UPDATE typed in a SQL shell), makes it a full
// sync that puts right what it owns. Held rows keep their rules, a new
// desired set and a new client (a daemon restart) sync in full.
func TestSyncIsOneRequestWhenNothingChanged(t *testing.T) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) { testSyncIsOneRequestWhenNothingChanged(t, b.DSN(t)) })
	}
}

func testSyncIsOneRequestWhenNothingChanged(t *testing.T, dsn string) {
	{
		ctx := t.Context()
		st := storetest.Open(t, dsn)
		var log requestLog
		inv := newInventory(t, st, server.Options{}, log.wrap)
		c := inv.newClient()
		h, err := c.EnsureHost(ctx, "gpu-1")
		if err != nil {
			t.Fatal(err)
		}
		s := syncs{t, c, h.ID, &log}
		want := gpuSlices("06", 4)

		first := s.run(want, devsync.Result{Created: 4}, list, bulkCreate)
		// Its own creates changed the version it read before them: full.
		s.run(want, devsync.Result{Unchanged: 4}, listIfSame)
		same := s.run(want, devsync.Result{Unchanged: 4}, listIfSame)
		for i, d := range same.Devices {
			if d.ID != first.Devices[i].ID || d.Addr != want[i].Addr {
				t.Errorf("the unchanged answer's device %d: %s %s, want %s %s", i, d.ID, d.Addr, first.Devices[i].ID, want[i].Addr)
			}
		}
		s.run(want, devsync.Result{Unchanged: 4}, listIfSame)

		// Behind the client's back, through the API and through SQL.
		limit := 1
		if _, err := st.UpdateDevice(ctx, first.Devices[1].ID, store.DeviceUpdate{MPSMemoryLimit: &limit}); err != nil {
			t.Fatal(err)
		}
		s.run(want, devsync.Result{Updated: 1, Unchanged: 3}, listIfSame, deviceWrite+first.Devices[1].ID)
		if d, _ := c.GetIsolatedDevice(ctx, first.Devices[1].ID); d.MPSMemoryLimit != want[1].MPSMemoryLimit {
			t.Errorf("the row changed behind the client's back was not put right: limit %d", d.MPSMemoryLimit)
		}
		s.run(want, devsync.Result{Unchanged: 4}, listIfSame)
		s.run(want, devsync.Result{Unchanged: 4}, listIfSame)
		storetest.Exec(t, dsn, `UPDATE isolated_devices SET unhealthy = true WHERE id = '`+first.Devices[2].ID+`'`)
		s.run(want, devsync.Result{Updated: 1, Unchanged: 3}, listIfSame, deviceWrite+first.Devices[2].ID)
		if d, _ := c.GetIsolatedDevice(ctx, first.Devices[2].ID); d.Unhealthy {
			t.Error("the row an UPDATE in SQL marked unhealthy was not put right")
		}
		s.run(want, devsync.Result{Unchanged: 4}, listIfSame)

		// A guest's attach: the rows as they are now, with the guest.
		if _, err := st.AttachDevice(ctx, "pod-1", first.Devices[3].ID); err != nil {
			t.Fatal(err)
		}
		attached := s.run(want, devsync.Result{Unchanged: 4}, listIfSame)
		if attached.Devices[3].GuestID != "pod-1" {
			t.Errorf("after an attach the sync answers guest %q", attached.Devices[3].GuestID)
		}
		again := s.run(want, devsync.Result{Unchanged: 4}, listIfSame)
		if again.Devices[3].GuestID != "pod-1" {
			t.Errorf("the unchanged answer lost the guest: %q", again.Devices[3].GuestID)
		}

		// A resize down while the guest holds slice 3 (new desired rows:
		// a full sync): kept, pending removal, reported as held while
		// unchanged, deleted once released.
		smaller := gpuSlices("06", 2)
		s.run(smaller, devsync.Result{Updated: 2, Deleted: 1, Held: []string{first.Devices[3].ID}},
			list, deviceWrite+first.Devices[0].ID, deviceWrite+first.Devices[1].ID,
			"DELETE /isolated_devices/"+first.Devices[2].ID, "DELETE /isolated_devices/"+first.Devices[3].ID,
			deviceWrite+first.Devices[3].ID)
		s.run(smaller, devsync.Result{Unchanged: 2, Held: []string{first.Devices[3].ID}},
			listIfSame, "DELETE /isolated_devices/"+first.Devices[3].ID)
		held := s.run(smaller, devsync.Result{Unchanged: 2, Held: []string{first.Devices[3].ID}}, listIfSame)
		if last := held.Devices[len(held.Devices)-1]; last.ID != first.Devices[3].ID || !last.PendingRemoval || last.GuestID != "pod-1" {
			t.Errorf("the held device in the unchanged answer: %+v", last)
		}
		if _, err := st.DetachDevice(ctx, "pod-1", first.Devices[3].ID); err != nil {
			t.Fatal(err)
		}
		s.run(smaller, devsync.Result{Unchanged: 2, Deleted: 1}, listIfSame, "DELETE /isolated_devices/"+first.Devices[3].ID)
		s.run(smaller, devsync.Result{Unchanged: 2}, listIfSame)
		s.run(smaller, devsync.Result{Unchanged: 2}, listIfSame)

		// A daemon restart: a new client syncs in full first.
		restarted := syncs{t, inv.newClient(), h.ID, &log}
		restarted.run(smaller, devsync.Result{Unchanged: 2}, list)
		restarted.run(smaller, devsync.Result{Unchanged: 2}, listIfSame)
		// A failed sync forgets: the next one is full.
		if _, err := restarted.c.SyncDevices(ctx, h.ID, append(smaller, smaller[0])); err == nil {
			t.Fatal("a desired set with a key twice synced")
		}
		restarted.run(smaller, devsync.Result{Unchanged: 2}, listIfSame)
	}
}

// Two inventories on one database (a cluster scaled out), and an
// inventory restarted: the version is the database's, so a client's
// condition holds across them, and a write through one is seen through
// the other.
func TestSyncConditionAcrossInventories(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		ctx := t.Context()
		st1, st2 := open(), open()
		var log requestLog
		// A load balancer in front of two inventories, taking turns; the
		// second can be replaced (a restart, a new Store on the database).
		handlers := []http.Handler{server.New(st1, server.Options{}, nil), server.New(st2, server.Options{}, nil)}
		var mu sync.Mutex
		turn := 0
		balancer := log.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			h := handlers[turn%2]
			turn++
			mu.Unlock()
			h.ServeHTTP(w, r)
		}))
		srv := httptest.NewServer(balancer)
		t.Cleanup(srv.Close)
		token, _, err := st1.CreateToken(ctx, store.NewToken{Name: "t", Role: store.RoleAdmin})
		if err != nil {
			t.Fatal(err)
		}
		c := New(Options{URL: srv.URL, Token: token})
		h, err := c.EnsureHost(ctx, "gpu-1")
		if err != nil {
			t.Fatal(err)
		}
		s := syncs{t, c, h.ID, &log}
		want := gpuSlices("1a", 3)
		first := s.run(want, devsync.Result{Created: 3}, list, bulkCreate)
		s.run(want, devsync.Result{Unchanged: 3}, listIfSame)
		s.run(want, devsync.Result{Unchanged: 3}, listIfSame)
		s.run(want, devsync.Result{Unchanged: 3}, listIfSame)

		// A write through either inventory is seen through both.
		for _, st := range []*store.Store{st1, st2} {
			n := 7
			if _, err := st.UpdateDevice(ctx, first.Devices[0].ID, store.DeviceUpdate{MPSThreadPercentage: &n}); err != nil {
				t.Fatal(err)
			}
			s.run(want, devsync.Result{Updated: 1, Unchanged: 2}, listIfSame, deviceWrite+first.Devices[0].ID)
			s.run(want, devsync.Result{Unchanged: 3}, listIfSame)
			s.run(want, devsync.Result{Unchanged: 3}, listIfSame)
		}

		// The second inventory restarts: nothing changed, still one request.
		mu.Lock()
		handlers[1] = server.New(open(), server.Options{}, nil)
		mu.Unlock()
		s.run(want, devsync.Result{Unchanged: 3}, listIfSame)
		s.run(want, devsync.Result{Unchanged: 3}, listIfSame)
	})
}

// An inventory that does not know devices_version (an older
// mps-inventory; a Cloudpods region is never asked, see pkg/region)
// ignores it and answers no version: every sync is a full one, as before,
// and right.
func TestSyncWithAnInventoryWithoutVersions(t *testing.T) {
	st := storetest.Open(t, storetest.SQLiteDSN(t))
	var log requestLog
	older := func(next http.Handler) http.Handler {
		return log.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			q := r.URL.Query()
			q.Del(api.ParamDevicesVersion) // ignored, as an unknown parameter
			r.URL.RawQuery = q.Encode()
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			body := rec.Body.Bytes()
			var m map[string]json.RawMessage
			if json.Unmarshal(body, &m) == nil {
				delete(m, "devices_version") // never answered
				delete(m, "devices_unchanged")
				body, _ = json.Marshal(m)
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.Header().Del("Content-Length")
			w.WriteHeader(rec.Code)
			_, _ = io.Copy(w, bytes.NewReader(body))
		}))
	}
	inv := newInventory(t, st, server.Options{}, older)
	c := inv.newClient()
	h, err := c.EnsureHost(t.Context(), "gpu-1")
	if err != nil {
		t.Fatal(err)
	}
	s := syncs{t, c, h.ID, &log}
	want := gpuSlices("06", 2)
	first := s.run(want, devsync.Result{Created: 2}, list, bulkCreate)
	s.run(want, devsync.Result{Unchanged: 2}, list)
	limit := 1
	if _, err := st.UpdateDevice(t.Context(), first.Devices[0].ID, store.DeviceUpdate{MPSMemoryLimit: &limit}); err != nil {
		t.Fatal(err)
	}
	s.run(want, devsync.Result{Updated: 1, Unchanged: 1}, list, deviceWrite+first.Devices[0].ID)
	s.run(want, devsync.Result{Unchanged: 2}, list)
}

// The digest of the desired rows changes with any field of any row and
// with their order, and with nothing else.
func TestDigestOfDesiredRows(t *testing.T) {
	want := gpuSlices("06", 3)
	base, err := digestOf(want)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := digestOf(gpuSlices("06", 3)); again != base {
		t.Fatal("the same rows digest differently")
	}
	changes := map[string]func(d []api.IsolatedDevice){
		"a limit":           func(d []api.IsolatedDevice) { d[1].MPSMemoryLimit++ },
		"unhealthy":         func(d []api.IsolatedDevice) { d[2].Unhealthy = true },
		"the model":         func(d []api.IsolatedDevice) { d[0].Model += " " },
		"a string's bytes":  func(d []api.IsolatedDevice) { d[0].Model, d[0].Addr = d[0].Model+d[0].Addr[:1], d[0].Addr[1:] },
		"pcie_info cleared": func(d []api.IsolatedDevice) { d[0].PCIEInfo = nil },
		"pcie_info's lanes": func(d []api.IsolatedDevice) { p := *d[0].PCIEInfo; p.LaneWidth = 8; d[0].PCIEInfo = &p },
		"the order":         func(d []api.IsolatedDevice) { d[0], d[1] = d[1], d[0] },
		"the cdi name":      func(d []api.IsolatedDevice) { d[2].CDIName = "x" },
	}
	for name, change := range changes {
		d := gpuSlices("06", 3)
		change(d)
		if got, err := digestOf(d); err != nil || got == base {
			t.Errorf("%s: digest unchanged (%v)", name, err)
		}
	}
	if fewer, _ := digestOf(want[:2]); fewer == base {
		t.Error("a row fewer: digest unchanged")
	}
}
