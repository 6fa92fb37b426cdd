package backend

import (
	"context"
	"errors"
	"sync"
	"testing"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/devsync"
)

// store is a RowStore that keeps what it was asked.
type store struct {
	mu       sync.Mutex
	ensured  []string
	fail     error
	synced   []api.IsolatedDevice
	syncedTo string
}

func (s *store) EnsureHost(_ context.Context, name string) (api.Host, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ensured = append(s.ensured, name)
	if s.fail != nil {
		return api.Host{}, s.fail
	}
	return api.Host{ID: "id-of-" + name, Name: name}, nil
}

func (s *store) SyncDevices(_ context.Context, hostID string, desired []api.IsolatedDevice) (devsync.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncedTo, s.synced = hostID, desired
	return devsync.Result{Devices: desired, Created: len(desired)}, nil
}

// The host is registered once per process, begun ahead of the first sync
// (while MPS is prepared); its id goes into every row and the answer. A
// failed registration is tried again at the next sync.
func TestRowsRegisterOnceAndSyncTheRows(t *testing.T) {
	ctx := context.Background()
	s := &store{}
	r := NewRows(ctx, s, "gpu-1", nil)
	o := Offer{Host: "gpu-1", Rows: []api.IsolatedDevice{{Addr: "1a:00.0-0"}, {Addr: "1a:00.0-1"}}}
	for range 3 {
		a, err := r.Sync(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if a.HostID != "id-of-gpu-1" || a.Created != 2 || s.syncedTo != "id-of-gpu-1" || s.synced[1].HostID != "id-of-gpu-1" {
			t.Fatalf("answer %+v, synced to %q: %+v", a, s.syncedTo, s.synced)
		}
	}
	if len(s.ensured) != 1 {
		t.Errorf("registered %d times: %v", len(s.ensured), s.ensured)
	}

	failing := &store{fail: errors.New("inventory away")}
	r = NewRows(ctx, failing, "", nil)
	if _, err := r.Sync(ctx, o); err == nil {
		t.Fatal("a sync without a registered host succeeded")
	}
	failing.mu.Lock()
	failing.fail = nil
	failing.mu.Unlock()
	if a, err := r.Sync(ctx, o); err != nil || a.HostID != "id-of-gpu-1" {
		t.Fatalf("the next sync: %+v %v", a, err)
	}
}
