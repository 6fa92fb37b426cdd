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
	if m.race(d) || m.has(d) {
		return nil, fmt.Errorf("creating %s: %w", d.Addr, ErrExists)
	}
	m.calls = append(m.calls, "create "+d.Addr)
	m.rows = append(m.rows, d)
	return []api.IsolatedDevice{d}, nil
}

// race creates d as another writer would (stale) when it is one of
// raceAdd, once.
func (m *memRows) race(d api.IsolatedDevice) bool {
	if !m.raceAdd[d.Addr] {
		return false
	}
	delete(m.raceAdd, d.Addr)
	stale := d
	stale.ID, stale.MPSMemoryLimit = "id-"+d.Addr, 1
	m.rows = append(m.rows, stale)
	return true
}

func (m *memRows) has(d api.IsolatedDevice) bool {
	for _, r := range m.rows {
		if KeyOf(r) == KeyOf(d) {
			return true
		}
	}
	return false
}

// batchRows is memRows with a CreateAll that creates all or none, as
// mps-inventory's bulk create does.
type batchRows struct{ *memRows }

func (b batchRows) CreateAll(_ context.Context, want []api.IsolatedDevice) ([][]api.IsolatedDevice, error) {
	var addrs []string
	exists := false
	for _, d := range want {
		addrs = append(addrs, d.Addr)
		exists = b.race(d) || b.has(d) || exists
	}
	b.calls = append(b.calls, fmt.Sprint("create all ", addrs))
	if exists {
		return nil, fmt.Errorf("creating %d: %w", len(want), ErrExists)
	}
	var out [][]api.IsolatedDevice
	for _, d := range want {
		d.ID = "id-" + d.Addr
		b.rows = append(b.rows, d)
		out = append(out, []api.IsolatedDevice{d})
	}
	return out, nil
}

// prefixRows is memRows with a CreateAll that creates one by one and stops
// at the first error, answering what it created (a client of an inventory
// without the bulk create).
type prefixRows struct{ *memRows }

func (p prefixRows) CreateAll(ctx context.Context, want []api.IsolatedDevice) ([][]api.IsolatedDevice, error) {
	var out [][]api.IsolatedDevice
	for _, d := range want {
		devs, err := p.Create(ctx, d)
		if err != nil {
			return out, err
		}
		out = append(out, devs)
	}
	return out, nil
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

// TestSync runs one sync over each kind of port: one that creates row by
// row, one that creates all missing rows at once (BatchCreator, all or
// none) and one whose CreateAll stops at the first error. They differ only
// in their calls.
func TestSync(t *testing.T) {
	for _, tt := range []struct {
		name      string
		port      func(*memRows) Port[api.IsolatedDevice]
		wantCalls []string
	}{
		{"one by one", func(m *memRows) Port[api.IsolatedDevice] { return m },
			[]string{"list", "update a-1", "create b-0", "list", "update b-1", "remove a-3"}},
		// b-1 appears during the batch: nothing created, then one by one.
		{"all or none", func(m *memRows) Port[api.IsolatedDevice] { return batchRows{m} },
			[]string{"list", "create all [b-0 b-1]", "update a-1", "create b-0", "list", "update b-1", "remove a-3"}},
		// b-0 created, b-1 appears: the rest one by one.
		{"up to an error", func(m *memRows) Port[api.IsolatedDevice] { return prefixRows{m} },
			[]string{"list", "create b-0", "update a-1", "list", "update b-1", "remove a-3"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := &memRows{
				rows:     []api.IsolatedDevice{dev("a-0", 10, ""), dev("a-1", 10, ""), dev("a-2", 10, "g1"), dev("a-3", 10, ""), dev("a-4", 10, "")},
				raceAdd:  map[string]bool{"b-1": true},
				raceGone: map[string]bool{"a-4": true},
			}
			want := []api.IsolatedDevice{wanted("a-0", 10), wanted("a-1", 20), wanted("b-0", 5), wanted("b-1", 5)}
			res, err := Sync(t.Context(), tt.port(m), want)
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
			if !reflect.DeepEqual(m.calls, tt.wantCalls) {
				t.Errorf("calls %q, want %q", m.calls, tt.wantCalls)
			}
		})
	}
}

// A port that can create all missing rows at once gets them in one call,
// in want's order, and the result is as if created one by one.
func TestSyncCreatesAllAtOnce(t *testing.T) {
	m := &memRows{rows: []api.IsolatedDevice{dev("a-1", 10, "")}}
	want := []api.IsolatedDevice{wanted("a-2", 10), wanted("a-0", 10), wanted("a-1", 10), wanted("a-3", 10)}
	res, err := Sync[api.IsolatedDevice](t.Context(), batchRows{m}, want)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, d := range res.Devices {
		addrs = append(addrs, d.ID)
	}
	if res.Created != 3 || res.Unchanged != 1 || fmt.Sprint(addrs) != "[id-a-2 id-a-0 id-a-1 id-a-3]" {
		t.Errorf("result %+v, devices %q", res, addrs)
	}
	if fmt.Sprint(m.calls) != "[list create all [a-2 a-0 a-3]]" {
		t.Errorf("calls %q", m.calls)
	}
	// Nothing missing: no call.
	m.calls = nil
	if _, err := Sync[api.IsolatedDevice](t.Context(), batchRows{m}, want); err != nil || fmt.Sprint(m.calls) != "[list]" {
		t.Errorf("second sync: %v, calls %q", err, m.calls)
	}
}

// A batch that fails for another reason than ErrExists ends the sync, with
// the rows it created counted and nothing else done.
func TestSyncBatchErrorCountsWhatWasCreated(t *testing.T) {
	m := &memRows{rows: []api.IsolatedDevice{dev("a-0", 10, ""), dev("a-9", 10, "")}}
	p := failingAfter{prefixRows{m}, 1}
	want := []api.IsolatedDevice{wanted("a-0", 20), wanted("a-1", 10), wanted("a-2", 10)}
	res, err := Sync[api.IsolatedDevice](t.Context(), p, want)
	if err == nil || err.Error() != "creating a-2: refused" {
		t.Errorf("err %v, want the batch's error", err)
	}
	if res.Created != 1 || len(res.Devices) != 1 || res.Devices[0].Addr != "a-1" || res.Updated+res.Deleted != 0 {
		t.Errorf("result %+v, want a-1 created and nothing else", res)
	}
	if fmt.Sprint(m.calls) != "[list create a-1]" {
		t.Errorf("calls %q", m.calls)
	}
}

// failingAfter is a prefixRows whose CreateAll fails after n rows.
type failingAfter struct {
	prefixRows
	n int
}

func (f failingAfter) CreateAll(ctx context.Context, want []api.IsolatedDevice) ([][]api.IsolatedDevice, error) {
	out, err := f.prefixRows.CreateAll(ctx, want[:f.n])
	if err != nil {
		return out, err
	}
	return out, fmt.Errorf("creating %s: refused", want[f.n].Addr)
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
