package client

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/devsync"
	"yunion.io/x/mps-daemon/pkg/inventory/server"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// allocEnv is a real inventory on loopback with an admin token, and a host
// "gpu-1" synced with two P40s of four slices (GPU-06 and GPU-07).
type allocEnv struct {
	*inventory
	host api.Host
}

// newAllocEnv starts one over st, a new database of any backend (tests run
// in storetest.ForEachBackend); wrap, when set, sits in front of the API.
func newAllocEnv(t *testing.T, st *store.Store, wrap func(next http.Handler) http.Handler) *allocEnv {
	t.Helper()
	e := &allocEnv{inventory: newInventory(t, st, server.Options{}, wrap)}
	c := e.client(Options{})
	var err error
	if e.host, err = c.EnsureHost(t.Context(), "gpu-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SyncDevices(t.Context(), e.host.ID, append(gpuSlices("06", 4), gpuSlices("07", 4)...)); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *allocEnv) client(o Options) *Client {
	o.URL, o.Token = e.url, e.token
	c := New(o)
	c.backoffBase, c.backoffMax = time.Millisecond, time.Millisecond
	return c
}

// device is the row at addr.
func (e *allocEnv) device(t *testing.T, addr string) api.IsolatedDevice {
	t.Helper()
	devs, _, err := e.st.ListDevices(t.Context(), store.DeviceFilter{Addrs: []string{addr}, Limit: 1})
	if err != nil || len(devs) != 1 {
		t.Fatalf("device %s: %v, %v", addr, devs, err)
	}
	return devs[0]
}

// heldBy lists the addrs guest holds, in creation order.
func (e *allocEnv) heldBy(t *testing.T, guest string) []string {
	t.Helper()
	devs, _, err := e.st.ListDevices(t.Context(), store.DeviceFilter{GuestID: guest, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return addrsOf(devs)
}

func addrsOf(devs []api.IsolatedDevice) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.Addr
	}
	return out
}

func TestAttachDetachPurge(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		ctx := t.Context()
		e := newAllocEnv(t, open(), nil)
		c := e.client(Options{})
		d0 := e.device(t, "06:00.0-0")

		got, err := c.AttachIsolatedDevice(ctx, "pod-a", d0.ID)
		if err != nil || !slices.Equal(addrsOf(got), []string{"06:00.0-0"}) || got[0].GuestID != "pod-a" {
			t.Fatalf("attach by id: %+v, %v", got, err)
		}
		if _, err := c.AttachIsolatedDevice(ctx, "pod-b", d0.ID); !IsRefused(err) {
			t.Errorf("attach of a held device: %v, want a refusal", err)
		}
		numa := 0
		got, err = c.AttachIsolatedDevices(ctx, "pod-b", api.AttachRequest{Model: "Tesla P40", Host: "gpu-1", Count: 3, NUMANode: &numa})
		if err != nil || !slices.Equal(addrsOf(got), []string{"07:00.0-0", "06:00.0-1", "07:00.0-1"}) {
			t.Fatalf("attach by model: %v, %v", addrsOf(got), err)
		}
		_, err = c.AttachIsolatedDevices(ctx, "pod-c", api.AttachRequest{Model: "Tesla P40", Host: "gpu-1", Count: 5})
		if !IsRefused(err) || err.Error() != `need 5 free NVIDIA_MPS "Tesla P40" devices on host gpu-1, 4 free` {
			t.Errorf("attach of more than free: %v", err)
		}

		if got, err := c.DetachIsolatedDevice(ctx, "pod-b", d0.ID); !IsRefused(err) || got != nil {
			t.Errorf("detach of another guest's device: %v, %v", got, err)
		}
		if got, err := c.DetachIsolatedDevice(ctx, "pod-a", d0.ID); err != nil || !slices.Equal(addrsOf(got), []string{"06:00.0-0"}) {
			t.Errorf("detach: %v, %v", addrsOf(got), err)
		}
		if got, err := c.DetachIsolatedDevice(ctx, "pod-a", d0.ID); err != nil || len(got) != 0 {
			t.Errorf("detach of a free device: %v, %v; want nothing", addrsOf(got), err)
		}
		if got, err := c.DetachAll(ctx, "pod-b"); err != nil || len(got) != 3 {
			t.Errorf("detach all: %v, %v", addrsOf(got), err)
		}

		d1 := e.device(t, "06:00.0-1")
		if _, err := c.AttachIsolatedDevice(ctx, "pod-d", d1.ID); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.PurgeIsolatedDevice(ctx, d1.ID, false); !IsDeviceInUse(err) {
			t.Errorf("purge of a held device: %v, want IsDeviceInUse", err)
		}
		dev, guest, err := c.PurgeIsolatedDevice(ctx, d1.ID, true)
		if err != nil || guest != "pod-d" || dev.ID != d1.ID {
			t.Errorf("force purge: %+v, %q, %v; want the device, detached from pod-d", dev, guest, err)
		}
		if dev, guest, err := c.PurgeIsolatedDevice(ctx, d0.ID, false); err != nil || guest != "" || dev.ID != d0.ID {
			t.Errorf("purge of a free device: %+v, %q, %v", dev, guest, err)
		}
	})
}

// loseAnswers serves the requests whose path ends in suffix, answering the
// first n of them 503 as if a proxy had lost the server's answer.
func loseAnswers(suffix string, n int64, seen *atomic.Int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasSuffix(r.URL.Path, suffix) {
				next.ServeHTTP(w, r)
				return
			}
			if seen.Add(1) <= n {
				next.ServeHTTP(httptest.NewRecorder(), r)
				http.Error(w, "upstream answer lost", http.StatusServiceUnavailable)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// A lost answer is retried where a second request is safe, and not where it
// would take more devices.
func TestAllocRetries(t *testing.T) {
	ctx := t.Context()
	// Each case on a database of its own.
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Run("attach by id is retried", func(t *testing.T) {
				var seen atomic.Int64
				e := newAllocEnv(t, storetest.Open(t, b.DSN(t)), loseAnswers("/attach-isolated-device", 1, &seen))
				got, err := e.client(Options{}).AttachIsolatedDevice(ctx, "pod-a", e.device(t, "06:00.0-0").ID)
				if err != nil || len(got) != 1 || seen.Load() != 2 {
					t.Errorf("%v, %v after %d requests; want the device after 2", addrsOf(got), err, seen.Load())
				}
			})
			t.Run("attach by model is not", func(t *testing.T) {
				var seen atomic.Int64
				e := newAllocEnv(t, storetest.Open(t, b.DSN(t)), loseAnswers("/attach-isolated-device", 1, &seen))
				_, err := e.client(Options{}).AttachIsolatedDevices(ctx, "pod-a", api.AttachRequest{Model: "Tesla P40", Host: "gpu-1", Count: 2})
				if err == nil || seen.Load() != 1 {
					t.Errorf("%v after %d requests; want the 503 after 1", err, seen.Load())
				}
				if held := e.heldBy(t, "pod-a"); len(held) != 2 {
					t.Errorf("pod-a holds %q; want the 2 of the one request that reached the server", held)
				}
			})
			t.Run("detach all is retried", func(t *testing.T) {
				var seen atomic.Int64
				e := newAllocEnv(t, storetest.Open(t, b.DSN(t)), loseAnswers("/detach-isolated-device", 1, &seen))
				c := e.client(Options{})
				if _, err := c.AttachIsolatedDevices(ctx, "pod-a", api.AttachRequest{Model: "Tesla P40", Host: "gpu-1", Count: 2}); err != nil {
					t.Fatal(err)
				}
				// The retry answers what it released: nothing, the lost first
				// answer had it all.
				got, err := c.DetachAll(ctx, "pod-a")
				if err != nil || len(got) != 0 || seen.Load() != 2 || len(e.heldBy(t, "pod-a")) != 0 {
					t.Errorf("%v, %v after %d requests; want everything released, after 2", addrsOf(got), err, seen.Load())
				}
			})
			t.Run("force purge is not", func(t *testing.T) {
				var seen atomic.Int64
				e := newAllocEnv(t, storetest.Open(t, b.DSN(t)), loseAnswers("/purge", 1, &seen))
				c := e.client(Options{})
				d := e.device(t, "06:00.0-0")
				if _, err := c.AttachIsolatedDevice(ctx, "pod-a", d.ID); err != nil {
					t.Fatal(err)
				}
				if _, _, err := c.PurgeIsolatedDevice(ctx, d.ID, true); err == nil || seen.Load() != 1 {
					t.Errorf("%v after %d requests; want the 503 after 1", err, seen.Load())
				}
			})
		})
	}
}

// refuseFirstDial fails the first n connection attempts with ECONNREFUSED,
// as a server that is restarting does, and dials for real afterwards.
func refuseFirstDial(n int64, dials *atomic.Int64) *http.Client {
	var d net.Dialer
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials.Add(1) <= n {
				return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
			}
			return d.DialContext(ctx, network, addr)
		},
	}}
}

// A refused connection proves nothing was sent: even the model-form attach
// and the force purge are tried again.
func TestUnrepeatableRetriedOnConnectionRefused(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		ctx := t.Context()
		e := newAllocEnv(t, open(), nil)
		var dials atomic.Int64
		c := e.client(Options{HTTPClient: refuseFirstDial(2, &dials)})
		got, err := c.AttachIsolatedDevices(ctx, "pod-a", api.AttachRequest{Model: "Tesla P40", Host: "gpu-1", Count: 2})
		if err != nil || len(got) != 2 || dials.Load() != 3 {
			t.Errorf("%v, %v after %d dials; want 2 devices after 3", addrsOf(got), err, dials.Load())
		}

		dials.Store(0)
		none := e.client(Options{HTTPClient: refuseFirstDial(10, &dials), Retries: -1})
		if _, err := none.AttachIsolatedDevices(ctx, "pod-b", api.AttachRequest{Model: "Tesla P40", Host: "gpu-1"}); err == nil || dials.Load() != 1 {
			t.Errorf("with retries off: %v after %d dials; want the error after 1", err, dials.Load())
		}
	})
}

// A host's sync marks a device it no longer wants but a guest holds as
// pending removal: it stays, is not handed out again, and goes with the
// first sync after the detach. A device that comes back is offered again.
func TestSyncPendingRemoval(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		ctx := t.Context()
		e := newAllocEnv(t, open(), nil)
		c := e.client(Options{})
		d3 := e.device(t, "06:00.0-3")
		if _, err := c.AttachIsolatedDevice(ctx, "pod-a", d3.ID); err != nil {
			t.Fatal(err)
		}
		two := append(gpuSlices("06", 2), gpuSlices("07", 4)...)
		for i := range 2 {
			two[i].MPSMemoryLimit, two[i].MPSThreadPercentage = 12288, 50 // as the split in 2 has it
		}
		mustSync(t, c, e.host.ID, two, devsync.Result{Updated: 2, Unchanged: 4, Deleted: 1, Held: []string{d3.ID}})
		if got := e.device(t, "06:00.0-3"); !got.PendingRemoval || got.GuestID != "pod-a" {
			t.Fatalf("held device after the resize: %+v; want kept for pod-a, pending removal", got)
		}
		// Reported again, not marked again.
		mustSync(t, c, e.host.ID, two, devsync.Result{Unchanged: 6, Held: []string{d3.ID}})

		if _, err := c.DetachIsolatedDevice(ctx, "pod-a", d3.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := c.AttachIsolatedDevice(ctx, "pod-b", d3.ID); !IsRefused(err) {
			t.Errorf("attach of a released device pending removal: %v, want a refusal", err)
		}
		if got, err := c.AttachIsolatedDevices(ctx, "pod-b", api.AttachRequest{Model: "Tesla P40", Host: "gpu-1", Count: 6}); err != nil || slices.Contains(addrsOf(got), "06:00.0-3") {
			t.Errorf("attach by model: %v, %v; want the 6 wanted devices only", addrsOf(got), err)
		}
		if _, err := c.DetachAll(ctx, "pod-b"); err != nil {
			t.Fatal(err)
		}
		mustSync(t, c, e.host.ID, two, devsync.Result{Unchanged: 6, Deleted: 1})

		// Held again, pending again, then wanted again: offered again.
		d1 := e.device(t, "06:00.0-1")
		if _, err := c.AttachIsolatedDevice(ctx, "pod-c", d1.ID); err != nil {
			t.Fatal(err)
		}
		mustSync(t, c, e.host.ID, slices.Delete(slices.Clone(two), 1, 2), devsync.Result{Unchanged: 5, Held: []string{d1.ID}})
		mustSync(t, c, e.host.ID, two, devsync.Result{Updated: 1, Unchanged: 5})
		if got := e.device(t, "06:00.0-1"); got.PendingRemoval || got.GuestID != "pod-c" {
			t.Errorf("device wanted again: %+v; want not pending, still pod-c's", got)
		}
	})
}

// The host reports its GPUs' health through the sync; an unhealthy device
// is not handed out.
func TestSyncCarriesUnhealthy(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		ctx := t.Context()
		e := newAllocEnv(t, open(), nil)
		c := e.client(Options{})
		want := append(gpuSlices("06", 4), gpuSlices("07", 4)...)
		for i := range 4 {
			want[i].Unhealthy = true
		}
		mustSync(t, c, e.host.ID, want, devsync.Result{Updated: 4, Unchanged: 4})
		got, err := c.AttachIsolatedDevices(ctx, "pod-a", api.AttachRequest{Model: "Tesla P40", Host: "gpu-1", Count: 4})
		if err != nil || !slices.Equal(addrsOf(got), []string{"07:00.0-0", "07:00.0-1", "07:00.0-2", "07:00.0-3"}) {
			t.Errorf("attach with GPU-06 unhealthy: %v, %v", addrsOf(got), err)
		}
		if _, err := c.AttachIsolatedDevices(ctx, "pod-b", api.AttachRequest{Model: "Tesla P40", Host: "gpu-1"}); !IsRefused(err) {
			t.Errorf("attach with only unhealthy devices free: %v, want a refusal", err)
		}
		for i := range 4 {
			want[i].Unhealthy = false
		}
		mustSync(t, c, e.host.ID, want, devsync.Result{Updated: 4, Unchanged: 4})
		if _, err := c.AttachIsolatedDevices(ctx, "pod-b", api.AttachRequest{Model: "Tesla P40", Host: "gpu-1"}); err != nil {
			t.Errorf("attach once healthy again: %v", err)
		}
	})
}
