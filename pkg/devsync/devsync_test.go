package devsync

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"yunion.io/x/mps-daemon/pkg/api"
)

// memRows is a backend in memory: rows by addr (one vendor), a guest per
// row, the addrs another writer creates before our create, and those
// another removes before our removal.
type memRows struct {
	rows     []api.IsolatedDevice
	raceAdd  map[string]bool
	raceGone map[string]bool
	calls    []string
}

func (m *memRows) Key(d api.IsolatedDevice) (Key, string) { return KeyOf(d), d.ID }

func (m *memRows) List(context.Context) ([]api.IsolatedDevice, error) {
	m.calls = append(m.calls, "list")
	return append([]api.IsolatedDevice(nil), m.rows...), nil
}

func (m *memRows) Create(_ context.Context, d api.IsolatedDevice) ([]api.IsolatedDevice, error) {
	d.ID = "id-" + d.Addr
	if m.raceAdd[d.Addr] {
		stale := d
		stale.MPSMemoryLimit = 1
		m.rows = append(m.rows, stale)
		return nil, fmt.Errorf("creating %s: %w", d.Addr, ErrExists)
	}
	m.calls = append(m.calls, "create "+d.Addr)
	m.rows = append(m.rows, d)
	return []api.IsolatedDevice{d}, nil
}

func (m *memRows) Update(_ context.Context, cur, d api.IsolatedDevice) ([]api.IsolatedDevice, bool, error) {
	if cur.MPSMemoryLimit == d.MPSMemoryLimit {
		return []api.IsolatedDevice{cur}, false, nil
	}
	m.calls = append(m.calls, "update "+d.Addr)
	for i := range m.rows {
		if m.rows[i].ID == cur.ID {
			m.rows[i].MPSMemoryLimit = d.MPSMemoryLimit
			return []api.IsolatedDevice{m.rows[i]}, true, nil
		}
	}
	return nil, false, fmt.Errorf("no row %s", cur.ID)
}

func (m *memRows) Remove(_ context.Context, d api.IsolatedDevice) ([]api.IsolatedDevice, error) {
	switch {
	case m.raceGone[d.Addr]:
		return nil, ErrGone
	case d.GuestID != "":
		return []api.IsolatedDevice{d}, ErrHeld
	}
	m.calls = append(m.calls, "remove "+d.Addr)
	return nil, nil
}

func dev(addr string, limit int, guest string) api.IsolatedDevice {
	return api.IsolatedDevice{ID: "id-" + addr, Addr: addr, VendorDeviceID: "10de:2330", MPSMemoryLimit: limit, GuestID: guest}
}

func wanted(addr string, limit int) api.IsolatedDevice {
	d := dev(addr, limit, "")
	d.ID = ""
	return d
}

func TestSync(t *testing.T) {
	m := &memRows{
		rows:     []api.IsolatedDevice{dev("a-0", 10, ""), dev("a-1", 10, ""), dev("a-2", 10, "g1"), dev("a-3", 10, ""), dev("a-4", 10, "")},
		raceAdd:  map[string]bool{"b-1": true},
		raceGone: map[string]bool{"a-4": true},
	}
	want := []api.IsolatedDevice{wanted("a-0", 10), wanted("a-1", 20), wanted("b-0", 5), wanted("b-1", 5)}
	res, err := Sync[api.IsolatedDevice](t.Context(), m, want)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, d := range res.Devices {
		addrs = append(addrs, fmt.Sprintf("%s %d pending=%v", d.Addr, d.MPSMemoryLimit, d.PendingRemoval))
	}
	res.Devices = nil
	// b-1 was created by another writer (stale) and is adopted: updated,
	// not created. a-2 is held: kept, reported, pending removal. a-4 went
	// meanwhile: as wanted, not counted.
	if want := (Result{Created: 1, Updated: 2, Unchanged: 1, Deleted: 1, Held: []string{"id-a-2"}}); !reflect.DeepEqual(res, want) {
		t.Errorf("result %+v, want %+v", res, want)
	}
	wantDevs := []string{"a-0 10 pending=false", "a-1 20 pending=false", "b-0 5 pending=false", "b-1 5 pending=false", "a-2 10 pending=true"}
	if !reflect.DeepEqual(addrs, wantDevs) {
		t.Errorf("devices %q, want %q", addrs, wantDevs)
	}
	wantCalls := []string{"list", "update a-1", "create b-0", "list", "update b-1", "remove a-3"}
	if !reflect.DeepEqual(m.calls, wantCalls) {
		t.Errorf("calls %q, want %q", m.calls, wantCalls)
	}
}

func TestSyncAdoptionLostReturnsTheCreateError(t *testing.T) {
	m := &memRows{}
	p := &vanishing{m}
	_, err := Sync[api.IsolatedDevice](t.Context(), p, []api.IsolatedDevice{wanted("a-0", 1)})
	if err == nil || err.Error() != "creating a-0: created meanwhile" {
		t.Errorf("err %v, want the create's error", err)
	}
}

// vanishing answers a create with ErrExists but never lists the row.
type vanishing struct{ *memRows }

func (v *vanishing) Create(_ context.Context, d api.IsolatedDevice) ([]api.IsolatedDevice, error) {
	return nil, fmt.Errorf("creating %s: %w", d.Addr, ErrExists)
}
