package store

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/api"
)

// allocHost is a host with two P40s of four slices: GPU-06 on NUMA node 0
// and GPU-07 on node 1, devices in creation order (06-0..3, 07-0..3).
func allocHost(t *testing.T, s *Store, name string) []api.IsolatedDevice {
	t.Helper()
	h := mustHost(t, s, name)
	var devs []api.IsolatedDevice
	for numa, bus := range []string{"06", "07"} {
		for i := range 4 {
			d := slice(h.ID, bus, i)
			d.NumaNode = numa
			devs = append(devs, mustDevice(t, s, d))
		}
	}
	return devs
}

func ids(devs []api.IsolatedDevice) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.ID
	}
	return out
}

func addrs(devs []api.IsolatedDevice) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.Addr
	}
	return out
}

// held lists the addrs of the devices guest holds, in creation order.
func held(t *testing.T, s *Store, guest string) []string {
	t.Helper()
	devs, _, err := s.ListDevices(t.Context(), DeviceFilter{GuestID: guest, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return addrs(devs)
}

// guests maps every device's id to its guest ("" when free).
func guests(t *testing.T, s *Store) map[string]string {
	t.Helper()
	devs, _, err := s.ListDevices(t.Context(), DeviceFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, d := range devs {
		m[d.ID] = d.GuestID
	}
	return m
}

func setFlags(t *testing.T, s *Store, id string, unhealthy, pending bool) {
	t.Helper()
	if _, err := s.UpdateDevice(t.Context(), id, DeviceUpdate{Unhealthy: &unhealthy, PendingRemoval: &pending}); err != nil {
		t.Fatal(err)
	}
}

func wantRefusal(t *testing.T, err, kind error, msg string) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("err = %v, want %v", err, kind)
	}
	if !strings.Contains(err.Error(), msg) {
		t.Errorf("message %q does not contain %q", err.Error(), msg)
	}
}

func TestAttachByID(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		devs := allocHost(t, s, "gpu-1")
		d0, d1, d2 := devs[0], devs[1], devs[2]
		setFlags(t, s, d1.ID, true, false)
		setFlags(t, s, d2.ID, false, true)

		got, err := s.AttachDevice(ctx, "g1", d0.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.GuestID != "g1" || got.ID != d0.ID {
			t.Errorf("attached %+v, want %s held by g1", got, d0.ID)
		}
		// The same guest again: answered as attached, nothing changes.
		again, err := s.AttachDevice(ctx, "g1", d0.ID)
		if err != nil || again.GuestID != "g1" || !again.UpdatedAt.Equal(got.UpdatedAt) {
			t.Errorf("second attach by the same guest: %+v, %v", again, err)
		}

		tests := []struct {
			name, guest, id string
			kind            error
			msg             string
		}{
			{"held by another guest", "g2", d0.ID, ErrInUse, api.MsgDeviceUsedByServer + " g1"},
			{"unhealthy", "g2", d1.ID, ErrNoCapacity, "is unhealthy"},
			{"pending removal", "g2", d2.ID, ErrNoCapacity, "is pending removal"},
			{"unknown device", "g2", "nope", ErrNotFound, "isolated_device nope not found"},
			{"empty guest", "", devs[3].ID, ErrInvalid, "guest:"},
			{"guest with a slash", "a/b", devs[3].ID, ErrInvalid, "guest:"},
			{"guest too long", strings.Repeat("g", 129), devs[3].ID, ErrInvalid, "guest:"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := s.AttachDevice(ctx, tt.guest, tt.id)
				wantRefusal(t, err, tt.kind, tt.msg)
			})
		}
		if got := held(t, s, "g1"); !slices.Equal(got, []string{"06:00.0-0"}) {
			t.Errorf("g1 holds %q", got)
		}
		if got := held(t, s, "g2"); len(got) != 0 {
			t.Errorf("refused attaches left g2 holding %q", got)
		}
	})
}

func TestAttachByModel(t *testing.T) {
	ctx := t.Context()
	one := func(n int) *int { return &n }
	p40 := api.AttachRequest{Model: "Tesla P40", Host: "gpu-1"}
	withCount := func(r api.AttachRequest, n int) api.AttachRequest { r.Count = n; return r }
	tests := []struct {
		name  string
		prep  func(t *testing.T, s *Store, devs []api.IsolatedDevice)
		req   api.AttachRequest
		want  []string
		kind  error
		msg   string
		guest string
		// byHostID names the host by its id rather than by its name.
		byHostID bool
	}{
		{name: "one by default, dev_type NVIDIA_MPS by default", req: p40, want: []string{"06:00.0-0"}},
		{name: "spread across GPUs", req: withCount(p40, 3), want: []string{"06:00.0-0", "07:00.0-0", "06:00.0-1"}},
		{
			name: "the GPU with most free slices first",
			prep: func(t *testing.T, s *Store, devs []api.IsolatedDevice) {
				if _, err := s.AttachDevice(ctx, "other", devs[0].ID); err != nil {
					t.Fatal(err)
				}
			},
			req: withCount(p40, 2), want: []string{"07:00.0-0", "06:00.0-1"},
		},
		{
			name: "NUMA node",
			req:  api.AttachRequest{Model: "Tesla P40", Host: "gpu-1", Count: 2, NUMANode: one(1)},
			want: []string{"07:00.0-0", "07:00.0-1"},
		},
		{name: "by host id", byHostID: true, req: p40, want: []string{"06:00.0-0"}},
		{
			name: "unhealthy and pending removal skipped",
			prep: func(t *testing.T, s *Store, devs []api.IsolatedDevice) {
				for _, d := range devs[:3] {
					setFlags(t, s, d.ID, true, false)
				}
				setFlags(t, s, devs[4].ID, false, true)
			},
			req: withCount(p40, 2), want: []string{"07:00.0-1", "06:00.0-3"},
		},
		{
			name: "not enough: nothing attached",
			prep: func(t *testing.T, s *Store, devs []api.IsolatedDevice) {
				for _, d := range devs[:6] {
					if _, err := s.AttachDevice(ctx, "other", d.ID); err != nil {
						t.Fatal(err)
					}
				}
			},
			req:  withCount(p40, 3),
			kind: ErrNoCapacity, msg: `need 3 free NVIDIA_MPS "Tesla P40" devices on host gpu-1, 2 free`,
		},
		{
			name: "not enough on the NUMA node",
			req:  api.AttachRequest{Model: "Tesla P40", Host: "gpu-1", Count: 5, NUMANode: one(0)},
			kind: ErrNoCapacity, msg: `need 5 free NVIDIA_MPS "Tesla P40" devices on host gpu-1 NUMA node 0, 4 free`,
		},
		{name: "other model", req: api.AttachRequest{Model: "Tesla T4", Host: "gpu-1"}, kind: ErrNoCapacity, msg: "0 free"},
		{name: "other dev_type", req: api.AttachRequest{DevType: "GPU-HPC", Model: "Tesla P40", Host: "gpu-1"}, kind: ErrNoCapacity, msg: "need 1 free GPU-HPC"},
		{name: "unknown host", req: api.AttachRequest{Model: "Tesla P40", Host: "gpu-9"}, kind: ErrNotFound, msg: `host "gpu-9" not found`},
		{name: "no model", req: api.AttachRequest{Host: "gpu-1"}, kind: ErrInvalid, msg: "missing required field model"},
		{name: "no host", req: api.AttachRequest{Model: "Tesla P40"}, kind: ErrInvalid, msg: "missing required field host"},
		{name: "negative count", req: withCount(p40, -1), kind: ErrInvalid, msg: "count:"},
		{name: "count too large", req: withCount(p40, MaxAttachCount+1), kind: ErrInvalid, msg: "count:"},
		{name: "bad numa node", req: api.AttachRequest{Model: "Tesla P40", Host: "gpu-1", NUMANode: one(-2)}, kind: ErrInvalid, msg: "numa_node:"},
		{name: "bad guest", guest: "no spaces", req: p40, kind: ErrInvalid, msg: "guest:"},
	}
	// One database per backend; each case gets a host of its own (named
	// for it in place of gpu-1) and a guest of its own.
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		s := open()
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				host := fmt.Sprintf("host-%d", i)
				devs := allocHost(t, s, host)
				if tt.prep != nil {
					tt.prep(t, s, devs)
				}
				switch {
				case tt.byHostID:
					tt.req.Host = devs[0].HostID
				case tt.req.Host == "gpu-1":
					tt.req.Host = host
				}
				guest := cmp.Or(tt.guest, fmt.Sprintf("g%d", i))
				before := guests(t, s)
				got, err := s.AttachDevices(ctx, guest, tt.req)
				if tt.kind != nil {
					wantRefusal(t, err, tt.kind, strings.ReplaceAll(tt.msg, "gpu-1", host))
					if got != nil {
						t.Errorf("refused attach returned %q", addrs(got))
					}
					if after := guests(t, s); !maps.Equal(after, before) {
						t.Errorf("refused attach changed who holds what: %v, was %v", after, before)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(addrs(got), tt.want) {
					t.Errorf("attached %q, want %q", addrs(got), tt.want)
				}
				for _, d := range got {
					if d.GuestID != guest {
						t.Errorf("%s answered with guest_id %q", d.Addr, d.GuestID)
					}
				}
				want := slices.Sorted(slices.Values(tt.want))
				if h := held(t, s, guest); !slices.Equal(h, want) {
					t.Errorf("stored: %s holds %q, want %q", guest, h, want)
				}
			})
		}
	})
}

func TestDetach(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		devs := allocHost(t, s, "gpu-1")
		if _, err := s.AttachDevices(ctx, "g1", api.AttachRequest{Model: "Tesla P40", Host: "gpu-1", Count: 3}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AttachDevice(ctx, "g2", devs[7].ID); err != nil {
			t.Fatal(err)
		}

		got, err := s.DetachDevice(ctx, "g1", devs[0].ID)
		if err != nil || !slices.Equal(addrs(got), []string{"06:00.0-0"}) || got[0].GuestID != "" {
			t.Fatalf("detach: %+v, %v", got, err)
		}
		// Again: the device is free, nothing to do, nothing returned.
		if got, err := s.DetachDevice(ctx, "g1", devs[0].ID); err != nil || len(got) != 0 {
			t.Errorf("detaching a free device: %q, %v; want nothing, no error", addrs(got), err)
		}
		_, err = s.DetachDevice(ctx, "g1", devs[7].ID)
		wantRefusal(t, err, ErrInUse, api.MsgDeviceUsedByServer+" g2, not by g1")
		_, err = s.DetachDevice(ctx, "g1", "nope")
		wantRefusal(t, err, ErrNotFound, "not found")

		all, err := s.DetachAll(ctx, "g1")
		if err != nil {
			t.Fatal(err)
		}
		if got := addrs(all); len(got) != 2 {
			t.Errorf("detach all: %q, want the two left", got)
		}
		if h := held(t, s, "g1"); len(h) != 0 {
			t.Errorf("g1 still holds %q", h)
		}
		if h := held(t, s, "g2"); !slices.Equal(h, []string{"07:00.0-3"}) {
			t.Errorf("g2 holds %q: detach all of g1 touched it", h)
		}
		if all, err := s.DetachAll(ctx, "g1"); err != nil || len(all) != 0 {
			t.Errorf("detach all with nothing held: %q, %v", addrs(all), err)
		}
	})
}

// A device pending removal keeps its flag through the detach: it is not
// handed out again, and deleting it is left to the host's sync.
func TestDetachPendingRemovalKeepsRow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		devs := allocHost(t, s, "gpu-1")
		if _, err := s.AttachDevice(ctx, "g1", devs[0].ID); err != nil {
			t.Fatal(err)
		}
		setFlags(t, s, devs[0].ID, false, true)
		if _, err := s.DetachDevice(ctx, "g1", devs[0].ID); err != nil {
			t.Fatal(err)
		}
		d, err := s.GetDevice(ctx, devs[0].ID)
		if err != nil || !d.PendingRemoval || d.GuestID != "" {
			t.Fatalf("after detach: %+v, %v", d, err)
		}
		_, err = s.AttachDevice(ctx, "g2", devs[0].ID)
		wantRefusal(t, err, ErrNoCapacity, "pending removal")
		if _, err := s.DeleteDevice(ctx, devs[0].ID); err != nil {
			t.Errorf("the host's delete after the detach: %v", err)
		}
	})
}

func TestPurge(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		devs := allocHost(t, s, "gpu-1")
		heldDev, err := s.AttachDevice(ctx, "g1", devs[0].ID)
		if err != nil {
			t.Fatal(err)
		}

		_, _, err = s.PurgeDevice(ctx, heldDev.ID, false)
		wantRefusal(t, err, ErrInUse, api.MsgDeviceUsedByServer)
		if _, err := s.DeleteDevice(ctx, heldDev.ID); !errors.Is(err, ErrNotEmpty) || err.Error() != api.MsgDeviceUsedByServer {
			t.Errorf("delete of a held device: %v, want exactly %q", err, api.MsgDeviceUsedByServer)
		}

		was, guest, err := s.PurgeDevice(ctx, heldDev.ID, true)
		if err != nil {
			t.Fatal(err)
		}
		if guest != "g1" || was.GuestID != "g1" || was.ID != heldDev.ID {
			t.Errorf("force purge answered %+v, detached %q; want the device as it was, detached g1", was, guest)
		}
		if _, err := s.GetDevice(ctx, heldDev.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("purged device still there: %v", err)
		}

		was, guest, err = s.PurgeDevice(ctx, devs[1].ID, true)
		if err != nil || guest != "" || was.ID != devs[1].ID {
			t.Errorf("force purge of a free device: %+v, %q, %v", was, guest, err)
		}
		_, _, err = s.PurgeDevice(ctx, "nope", true)
		wantRefusal(t, err, ErrNotFound, "not found")
	})
}

// A PUT may give a free device a guest or free a held one (an operator's
// repair), never move it from one guest to another.
func TestUpdateDoesNotMoveGuests(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		devs := allocHost(t, s, "gpu-1")
		g1, g2, none := "g1", "g2", ""
		if _, err := s.UpdateDevice(ctx, devs[0].ID, DeviceUpdate{GuestID: &g1}); err != nil {
			t.Fatal(err)
		}
		_, err := s.UpdateDevice(ctx, devs[0].ID, DeviceUpdate{GuestID: &g2})
		wantRefusal(t, err, ErrInUse, "used by server g1")
		if _, err := s.UpdateDevice(ctx, devs[0].ID, DeviceUpdate{GuestID: &g1}); err != nil {
			t.Errorf("same guest again: %v", err)
		}
		if _, err := s.UpdateDevice(ctx, devs[0].ID, DeviceUpdate{GuestID: &none}); err != nil {
			t.Errorf("freeing: %v", err)
		}
	})
}

func TestListFlagFilters(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		devs := allocHost(t, s, "gpu-1")
		setFlags(t, s, devs[1].ID, true, false)
		setFlags(t, s, devs[2].ID, false, true)
		setFlags(t, s, devs[3].ID, true, true)
		yes, no := true, false
		tests := []struct {
			name string
			f    DeviceFilter
			want []string
		}{
			{"unhealthy", DeviceFilter{Unhealthy: &yes}, []string{"06:00.0-1", "06:00.0-3"}},
			{"pending removal", DeviceFilter{PendingRemoval: &yes}, []string{"06:00.0-2", "06:00.0-3"}},
			{"healthy and wanted", DeviceFilter{Unhealthy: &no, PendingRemoval: &no, Models: []string{"Tesla P40"}},
				[]string{"06:00.0-0", "07:00.0-0", "07:00.0-1", "07:00.0-2", "07:00.0-3"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				tt.f.Limit = 100
				got, total, err := s.ListDevices(ctx, tt.f)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(addrs(got), tt.want) || total != len(tt.want) {
					t.Errorf("got %q (total %d), want %q", addrs(got), total, tt.want)
				}
			})
		}
	})
}

// The statements of allocation, and the list filters a scheduler or an
// operator uses around them, must be served by an index, not by a scan of
// every device of the cluster. SQLite's planner is asked with EXPLAIN QUERY
// PLAN after ANALYZE; PostgreSQL's with EXPLAIN, sequential scans priced
// out of reach (with a few rows it would rightly prefer one): the check is
// that a usable index exists and the planner takes it.
func TestAllocQueriesUseIndexes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		s := open()
		allocHost(t, s, "gpu-1")
		byGuest, byGuestArgs := DeviceFilter{GuestID: "g"}.where("")
		byModel, byModelArgs := DeviceFilter{DevTypes: []string{api.DevTypeNvidiaMPS}, Models: []string{"m"}}.where("h")
		now := formatTime(s.timestamp())
		tests := []struct {
			name, query string
			args        []any
			wantIndex   string // any of |-separated names
		}{
			// The host's count: the host's index (no backend keeps a
			// pick index now). The pick's statements are below, per
			// backend.
			// By id: any index will do (PostgreSQL may take guest_id's on
			// a table this small).
			{"claim", claimStmt, []any{"g", now, "x"}, ""},
			{"release", releaseStmt, []any{now, "x", "g"}, ""},
			{"claim, returning the row", claimReturningStmt, []any{"g", now, "x"}, ""},
			{"release, returning the row", releaseReturningStmt, []any{now, "x", "g"}, ""},
			{"list --server, page", `SELECT ` + deviceColumns + deviceFrom + byGuest + ` ORDER BY d.seq LIMIT 20 OFFSET 0`, byGuestArgs, "isolated_devices_guest_id"},
			{"detach all", fmt.Sprintf(detachAllStmt, s.d.forUpdate()), []any{now, "g", "g"}, "isolated_devices_guest_id"},
			{"list --server", `SELECT COUNT(*) FROM isolated_devices d` + byGuest, byGuestArgs, "isolated_devices_guest_id"},
			{"list --host --dev-type --model", `SELECT COUNT(*) FROM isolated_devices d` + byModel, byModelArgs, "isolated_devices_host_seq"},
		}
		type planTest = struct {
			name, query string
			args        []any
			wantIndex   string
		}
		if s.d.name == "postgres" {
			// The pick's summary (pickread.go): the free rows per GPU,
			// ranges of the index of claimable rows (migration 0009).
			tests = append(tests, planTest{"pick summary", pgPickSummary(numaCond + sharingCond),
				pgPickSummaryArgs("h", "g", api.AttachRequest{DevType: api.DevTypeNvidiaMPS, Model: "m", Count: 1, SharingMode: "MPS"}, []any{0, "MPS"}),
				"isolated_devices_free_gpu"})
		}
		if s.d.name == "sqlite" {
			// The pick's summary and its seek (pickread.go): the counters'
			// key, the guest's rows from the guest_id index (migration
			// 0010: not the host's rows, filtered), and one GPU's free
			// rows in seq order (no sort) from the partial index.
			tests = append(tests, []planTest{
				{"pick summary", fmt.Sprintf(pickSummaryQuery, numaCond+sharingCond), []any{"h", api.DevTypeNvidiaMPS, "m", 0, "MPS", "h", api.DevTypeNvidiaMPS, "m", "g"}, "PRIMARY KEY"},
				{"pick summary, the guest's rows", fmt.Sprintf(pickSummaryQuery, ""), []any{"h", api.DevTypeNvidiaMPS, "m", "h", api.DevTypeNvidiaMPS, "m", "g"}, "isolated_devices_guest_id"},
				{"pick's first free slices", fmt.Sprintf(pickFirstFreeQuery, numaCond, 2), []any{"h", api.DevTypeNvidiaMPS, "m", "GPU-06", 0}, "isolated_devices_free_gpu"},
			}...)
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				plan := explain(t, s, tt.query, tt.args...)
				// Read in index order: SQLite's seek, PostgreSQL's counts
				// per GPU and first slices (migration 0009).
				sorts := strings.Contains(plan, "TEMP B-TREE") || strings.Contains(plan, "Sort")
				if (tt.name == "pick's first free slices" || (tt.name == "pick summary" && s.d.name == "postgres")) && sorts {
					t.Errorf("plan sorts:\n%s", plan)
				}
				// A full scan of the devices: SQLite's SCAN (SEARCH is a
				// lookup), or PostgreSQL's Seq Scan or an index scan
				// without a condition. (The join's hosts may be scanned:
				// a handful of rows here.)
				full := strings.Contains(plan, "Seq Scan on isolated_devices") || (s.d.name == "postgres" && !strings.Contains(plan, "Index Cond"))
				for line := range strings.Lines(plan) {
					full = full || strings.HasPrefix(line, "SCAN d") || strings.HasPrefix(line, "SCAN isolated_devices")
				}
				uses := false
				for index := range strings.SplitSeq(tt.wantIndex, "|") {
					uses = uses || strings.Contains(plan, index)
				}
				if full || !uses {
					t.Errorf("plan scans the table or does not use index %q:\n%s", tt.wantIndex, plan)
				}
			})
		}
	})
}

// explain returns the backend's plan of query, one line per row (see
// Store.explain), after ANALYZE and, on PostgreSQL, with sequential scans
// priced out.
func explain(t *testing.T, s *Store, query string, args ...any) string {
	t.Helper()
	ctx := t.Context()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	setup := []string{`ANALYZE`}
	if s.d.name == "postgres" {
		setup = append(setup, `SET LOCAL enable_seqscan = off`)
	}
	for _, q := range setup {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	plan, err := s.explain(ctx, tx, query, args)
	if err != nil {
		t.Fatalf("explaining %s: %v", query, err)
	}
	return plan
}

// A model-form attach names its host by id or name, an id first: a host
// whose name is another host's id does not take that host's attaches, and
// a name no id matches finds its host.
func TestAttachNamesTheHostByIDFirst(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		a := allocHost(t, s, "gpu-a")
		b := allocHost(t, s, a[0].HostID) // named as gpu-a's id
		for _, tt := range []struct{ host, want string }{
			{a[0].HostID, a[0].HostID},
			{"gpu-a", a[0].HostID},
			{b[0].HostID, b[0].HostID},
		} {
			got, err := s.AttachDevices(ctx, "pod-"+tt.want[:8], api.AttachRequest{Model: "Tesla P40", Host: tt.host, Count: 1})
			if err != nil {
				t.Fatalf("attach on %q: %v", tt.host, err)
			}
			if got[0].HostID != tt.want {
				t.Errorf("attach on %q took a device of host %s, want %s", tt.host, got[0].HostID, tt.want)
			}
		}
		if _, err := s.AttachDevices(ctx, "pod-x", api.AttachRequest{Model: "Tesla P40", Host: "gpu-none", Count: 1}); !errors.Is(err, ErrNotFound) {
			t.Errorf("attach on a host nobody names: %v, want ErrNotFound", err)
		}
	})
}
