package store

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"yunion.io/x/mps-daemon/pkg/api"
)

func fmtList(s []string) string { return strings.Join(s, " ") }

func TestListDevicesFiltersAndPages(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		h1 := mustHost(t, s, "gpu-1")
		h2 := mustHost(t, s, "gpu-2")

		// Creation order is the list order: gpu-1's two GPUs, then gpu-2's.
		var held api.IsolatedDevice
		for i := range 4 {
			d := mustDevice(t, s, slice(h1.ID, "06", i))
			if i == 2 {
				held = d
			}
		}
		for i := range 2 {
			d := slice(h1.ID, "1a", i)
			d.Model = "NVIDIA H100"
			mustDevice(t, s, d)
		}
		mustDevice(t, s, slice(h2.ID, "06", 0))
		share := slice(h2.ID, "07", 0)
		share.DevType = "NVIDIA_GPU_SHARE"
		mustDevice(t, s, share)

		guest := "guest-1"
		if _, err := s.UpdateDevice(ctx, held.ID, DeviceUpdate{GuestID: &guest}); err != nil {
			t.Fatal(err)
		}

		tests := []struct {
			name      string
			f         DeviceFilter
			want      string // host/addr of each row, in order
			wantTotal int
		}{
			{"all", DeviceFilter{Limit: 20},
				"gpu-1/06:00.0-0 gpu-1/06:00.0-1 gpu-1/06:00.0-2 gpu-1/06:00.0-3 gpu-1/1a:00.0-0 gpu-1/1a:00.0-1 gpu-2/06:00.0-0 gpu-2/07:00.0-0", 8},
			{"first page", DeviceFilter{Limit: 3}, "gpu-1/06:00.0-0 gpu-1/06:00.0-1 gpu-1/06:00.0-2", 8},
			{"last page", DeviceFilter{Limit: 3, Offset: 6}, "gpu-2/06:00.0-0 gpu-2/07:00.0-0", 8},
			{"past the end", DeviceFilter{Limit: 3, Offset: 8}, "", 8},
			{"limit zero counts only", DeviceFilter{HostID: "gpu-2"}, "", 2},
			{"host by name", DeviceFilter{HostID: "gpu-2", Limit: 20}, "gpu-2/06:00.0-0 gpu-2/07:00.0-0", 2},
			{"host by id", DeviceFilter{HostID: h2.ID, Limit: 20}, "gpu-2/06:00.0-0 gpu-2/07:00.0-0", 2},
			{"dev_type", DeviceFilter{DevTypes: []string{"NVIDIA_GPU_SHARE"}, Limit: 20}, "gpu-2/07:00.0-0", 1},
			{"model", DeviceFilter{Models: []string{"NVIDIA H100"}, Limit: 20}, "gpu-1/1a:00.0-0 gpu-1/1a:00.0-1", 2},
			{"addr", DeviceFilter{Addrs: []string{"06:00.0-0"}, Limit: 20}, "gpu-1/06:00.0-0 gpu-2/06:00.0-0", 2},
			{"gpu", DeviceFilter{DevicePaths: []string{"GPU-1a"}, Limit: 20}, "gpu-1/1a:00.0-0 gpu-1/1a:00.0-1", 2},
			{"guest", DeviceFilter{GuestID: guest, Limit: 20}, "gpu-1/06:00.0-2", 1},
			{"unused on one GPU, paged", DeviceFilter{HostID: "gpu-1", DevicePaths: []string{"GPU-06"}, Unused: true, Limit: 2, Offset: 1},
				"gpu-1/06:00.0-1 gpu-1/06:00.0-3", 3},
			{"combined", DeviceFilter{HostID: "gpu-1", DevTypes: []string{api.DevTypeNvidiaMPS}, Models: []string{"Tesla P40"}, Limit: 20},
				"gpu-1/06:00.0-0 gpu-1/06:00.0-1 gpu-1/06:00.0-2 gpu-1/06:00.0-3", 4},
			{"nothing matches", DeviceFilter{HostID: "gpu-2", Models: []string{"NVIDIA H100"}, Limit: 20}, "", 0},
			// Cloudpods' default order, and its list and scalar filters.
			{"newest first", DeviceFilter{Limit: 3, Desc: true}, "gpu-2/07:00.0-0 gpu-2/06:00.0-0 gpu-1/1a:00.0-1", 8},
			{"newest first, second page", DeviceFilter{Limit: 3, Offset: 3, Desc: true},
				"gpu-1/1a:00.0-0 gpu-1/06:00.0-3 gpu-1/06:00.0-2", 8},
			{"newest first on one host", DeviceFilter{HostID: "gpu-2", Limit: 20, Desc: true}, "gpu-2/07:00.0-0 gpu-2/06:00.0-0", 2},
			{"two dev_types", DeviceFilter{DevTypes: []string{"NVIDIA_GPU_SHARE", "GPU"}, Limit: 20}, "gpu-2/07:00.0-0", 1},
			{"two models", DeviceFilter{Models: []string{"NVIDIA H100", "Tesla P40"}, HostID: "gpu-2", Limit: 20},
				"gpu-2/06:00.0-0 gpu-2/07:00.0-0", 2},
			// --gpu is dev_type starting with GPU: NVIDIA_GPU_SHARE is not one.
			{"gpu flag", DeviceFilter{GPU: true, Limit: 20}, "", 0},
			{"vendor by name, any case", DeviceFilter{Vendors: []string{"nvidia"}, HostID: "gpu-2", Limit: 20},
				"gpu-2/06:00.0-0 gpu-2/07:00.0-0", 2},
			{"vendor by id", DeviceFilter{Vendors: []string{"1002"}, Limit: 20}, "", 0},
			{"vendor_device_id", DeviceFilter{VendorDeviceIDs: []string{"10de:1b38"}, HostID: "gpu-2", Limit: 20},
				"gpu-2/06:00.0-0 gpu-2/07:00.0-0", 2},
			{"name", DeviceFilter{Names: []string{"mps-1a-1"}, Limit: 20}, "gpu-1/1a:00.0-1", 1},
			{"numa node", DeviceFilter{NumaNodes: []int{0, 1}, Limit: 20}, "", 0},
			{"index", DeviceFilter{Index: ptr(-1), HostID: "gpu-2", Limit: 20}, "gpu-2/06:00.0-0 gpu-2/07:00.0-0", 2},
			{"device_minor 0", DeviceFilter{DeviceMinor: ptr(0), Limit: 20}, "", 0},
		}
		names := map[string]string{h1.ID: "gpu-1", h2.ID: "gpu-2"}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				devs, total, err := s.ListDevices(ctx, tt.f)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, d := range devs {
					got = append(got, names[d.HostID]+"/"+d.Addr)
					if d.Host != "" {
						t.Errorf("%s: host name filled without details", d.Addr)
					}
				}
				if fmtList(got) != tt.want || total != tt.wantTotal {
					t.Errorf("got %q total %d\nwant %q total %d", fmtList(got), total, tt.want, tt.wantTotal)
				}
			})
		}

		t.Run("details fill the host name, vendor and guest", func(t *testing.T) {
			devs, _, err := s.ListDevices(ctx, DeviceFilter{Details: true, Limit: 20})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range devs {
				// The guest is known by its id only; its status not at all.
				if d.Host != names[d.HostID] || d.Vendor != "NVIDIA" || d.Guest != d.GuestID || d.GuestStatus != "" {
					t.Errorf("%s: host %q vendor %q guest %q status %q; want host %q, NVIDIA, guest %q and no status",
						d.Addr, d.Host, d.Vendor, d.Guest, d.GuestStatus, names[d.HostID], d.GuestID)
				}
			}
		})
		t.Run("unknown host", func(t *testing.T) {
			if _, _, err := s.ListDevices(ctx, DeviceFilter{HostID: "typo", Limit: 20}); !errors.Is(err, ErrNotFound) {
				t.Errorf("err = %v, want ErrNotFound", err)
			}
		})
		t.Run("negative offset", func(t *testing.T) {
			if _, _, err := s.ListDevices(ctx, DeviceFilter{Offset: -1}); !errors.Is(err, ErrInvalid) {
				t.Errorf("err = %v, want ErrInvalid", err)
			}
		})
	})
}

// Every list filter climc offers reads its page in seq order from an index
// (no sort of the matching rows, no scan of the table) and takes its total
// from the counters or from the index of the host, GPU or guest that bounds
// it. The plans are asked as in TestAllocQueriesUseIndexes, on a few rows:
// what is checked is that the indexes exist and fit; the plans at a million
// rows are in docs/benchmarks.md (mps-inventory-bench -explain).
func TestListQueriesUseIndexes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		s := open()
		devs := allocHost(t, s, "gpu-1")
		hostID := devs[0].HostID
		yes := true
		tests := []struct {
			name string
			f    DeviceFilter
			// page is the index the page is read from ("" for the table
			// itself, in seq order); count is where the total comes from.
			page, count string
		}{
			{"no filter", DeviceFilter{}, "", "isolated_device_counts"},
			{"--host", DeviceFilter{HostID: hostID}, "isolated_devices_host_seq", "isolated_devices_host_seq"},
			{"--dev-type", DeviceFilter{DevTypes: []string{api.DevTypeNvidiaMPS}}, "isolated_devices_dev_type", "isolated_device_counts"},
			{"--model", DeviceFilter{Models: []string{"m"}}, "isolated_devices_model", "isolated_device_counts"},
			{"--dev-type --model", DeviceFilter{DevTypes: []string{api.DevTypeNvidiaMPS}, Models: []string{"m"}}, "isolated_devices_model", "isolated_device_counts"},
			{"--gpu", DeviceFilter{DevicePaths: []string{"GPU-06"}}, "isolated_devices_device_path", "isolated_devices_device_path"},
			{"--server", DeviceFilter{GuestID: "g"}, "isolated_devices_guest_id", "isolated_devices_guest_id"},
			{"--unused", DeviceFilter{Unused: true}, "isolated_devices_guest_id", "isolated_device_counts"},
			{"--unused --model", DeviceFilter{Unused: true, Models: []string{"m"}}, "isolated_devices_free_model", "isolated_device_counts"},
			{"--unhealthy", DeviceFilter{Unhealthy: &yes}, "isolated_devices_unhealthy", "isolated_device_counts"},
			{"--pending-removal", DeviceFilter{PendingRemoval: &yes}, "isolated_devices_pending_removal", "isolated_device_counts"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				// HostID holds the id, as ListDevices resolves it. Both
				// orders: newest first is Cloudpods' default.
				for _, desc := range []bool{false, true} {
					q, args := tt.f.pageQuery(tt.f.HostID, s.limitClause(20), 0, -1, desc)
					plan := explain(t, s, q, args...)
					sorted := strings.Contains(plan, "TEMP B-TREE") || strings.Contains(plan, "Sort")
					if sorted || !strings.Contains(plan, cmp.Or(tt.page, s.pkIndex())) {
						t.Errorf("page (desc %t) sorts or does not read index %q:\n%s", desc, tt.page, plan)
					}
				}
				q, args := tt.f.countQuery(tt.f.HostID)
				if plan := explain(t, s, q, args...); !strings.Contains(plan, tt.count) || strings.Contains(plan, "SCAN d") {
					t.Errorf("total is not taken from %q:\n%s", tt.count, plan)
				}
			})
		}
		// Cloudpods' --gpu (dev_type starting with GPU, a range: its page
		// sorts the few GPU rows, see gpuCond) counts from the counters.
		q, args := DeviceFilter{GPU: true}.countQuery("")
		if plan := explain(t, s, q, args...); !strings.Contains(plan, "isolated_device_counts") {
			t.Errorf("--gpu total is not taken from the counters:\n%s", plan)
		}
		// A marker page seeks to its first row.
		q, args = DeviceFilter{Models: []string{"m"}}.pageQuery("", s.limitClause(21), 0, 5, false)
		if plan := explain(t, s, q, args...); !strings.Contains(plan, "rowid>?") && !strings.Contains(plan, "seq >= ") {
			t.Errorf("marker page does not seek:\n%s", plan)
		}
	})
}

// pkIndex is how the backend's plan names reading the devices in seq
// order: SQLite scans the table (its rowid is seq), PostgreSQL the primary
// key's index.
func (s *Store) pkIndex() string {
	if s.d.name == "sqlite" {
		return "SCAN d"
	}
	return "isolated_devices_pkey"
}

// A marker walk visits every row once, in order, whatever the page size and
// direction, and a row deleted during the walk shifts nothing.
func TestListDevicesByMarker(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		devs := allocHost(t, s, "gpu-1") // 06:00.0-0..3, 07:00.0-0..3
		h2 := mustHost(t, s, "gpu-2")
		devs = append(devs, mustDevice(t, s, slice(h2.ID, "06", 0)))
		all := addrs(devs)
		backward := slices.Clone(all)
		slices.Reverse(backward)

		walk := func(t *testing.T, f DeviceFilter, desc bool, during func(page int)) []string {
			t.Helper()
			var got []string
			marker := ""
			for page := 0; ; page++ {
				p, err := s.ListDevicesByMarker(ctx, f, marker, desc)
				if err != nil {
					t.Fatal(err)
				}
				if len(p.Devices) > f.Limit || (p.NextMarker != "" && len(p.Devices) != f.Limit) {
					t.Fatalf("page %d: %d rows, next %q (limit %d)", page, len(p.Devices), p.NextMarker, f.Limit)
				}
				got = append(got, addrs(p.Devices)...)
				if p.NextMarker == "" {
					return got
				}
				if during != nil {
					during(page)
				}
				marker = p.NextMarker
			}
		}
		for _, limit := range []int{1, 2, 3, 9, 20} {
			t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
				if got := walk(t, DeviceFilter{Limit: limit}, false, nil); !slices.Equal(got, all) {
					t.Errorf("ascending: %q, want %q", got, all)
				}
				if got := walk(t, DeviceFilter{Limit: limit}, true, nil); !slices.Equal(got, backward) {
					t.Errorf("descending: %q", got)
				}
			})
		}
		t.Run("filtered", func(t *testing.T) {
			got := walk(t, DeviceFilter{HostID: "gpu-1", DevicePaths: []string{"GPU-07"}, Details: true, Limit: 3}, false, nil)
			if !slices.Equal(got, all[4:8]) {
				t.Errorf("got %q, want %q", got, all[4:8])
			}
		})
		t.Run("a delete during the walk shifts nothing", func(t *testing.T) {
			got := walk(t, DeviceFilter{Limit: 2}, false, func(page int) {
				if page == 0 {
					if _, err := s.DeleteDevice(ctx, devs[0].ID); err != nil {
						t.Fatal(err)
					}
				}
			})
			if !slices.Equal(got, all) {
				t.Errorf("got %q, want %q", got, all)
			}
		})
		t.Run("limit 0 gives the first marker", func(t *testing.T) {
			p, err := s.ListDevicesByMarker(ctx, DeviceFilter{}, "", false)
			if err != nil || len(p.Devices) != 0 || p.NextMarker == "" {
				t.Fatalf("%+v, %v", p, err)
			}
			p, err = s.ListDevicesByMarker(ctx, DeviceFilter{Limit: 1}, p.NextMarker, false)
			if err != nil || len(p.Devices) != 1 || p.Devices[0].ID != devs[1].ID {
				t.Errorf("page at the first marker: %v, %v; want %s", addrs(p.Devices), err, devs[1].Addr)
			}
		})
		for _, tt := range []struct {
			name   string
			f      DeviceFilter
			marker string
		}{
			{"not a number", DeviceFilter{Limit: 1}, "abc"},
			{"negative", DeviceFilter{Limit: 1}, "-3"},
			{"with an offset", DeviceFilter{Limit: 1, Offset: 2}, ""},
		} {
			t.Run(tt.name, func(t *testing.T) {
				if _, err := s.ListDevicesByMarker(ctx, tt.f, tt.marker, false); !errors.Is(err, ErrInvalid) {
					t.Errorf("err = %v, want ErrInvalid", err)
				}
			})
		}
	})
}

func TestCreateDevices(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		h := mustHost(t, s, "gpu-1")
		batch := []api.IsolatedDevice{slice("gpu-1", "06", 1), slice(h.ID, "06", 0), slice(h.ID, "06", 2)} // by name, by id
		batch[2].Name = ""                                                                                 // named by the store
		created, err := s.CreateDevices(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		listed, _, err := s.ListDevices(ctx, DeviceFilter{Limit: 10, Details: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(listed) != len(batch) {
			t.Fatalf("listed %d devices, want %d", len(listed), len(batch))
		}
		for i, d := range listed {
			// As CreateDevice answers: the stored row with its details.
			if !reflect.DeepEqual(d, created[i]) || d.HostID != h.ID || d.ID == "" || d.Host != "gpu-1" || d.Vendor != "NVIDIA" {
				t.Errorf("row %d: listed %+v\ncreated %+v", i, d, created[i])
			}
		}
		if got := addrs(listed); !slices.Equal(got, []string{"06:00.0-1", "06:00.0-0", "06:00.0-2"}) {
			t.Errorf("list order %q: want the order given", got)
		}
		if !strings.HasPrefix(created[2].Name, "dev_gpu-1_") {
			t.Errorf("name of a row without one = %q, want dev_gpu-1_<n>", created[2].Name)
		}

		// All or nothing; a refusal names the row.
		long := slice(h.ID, "07", 1)
		long.Model = strings.Repeat("x", api.MaxModelBytes+1)
		noAddr := slice(h.ID, "07", 1)
		noAddr.Addr = ""
		withID := slice(h.ID, "07", 1)
		withID.ID = uuid.NewString()
		for _, tc := range []struct {
			name  string
			batch []api.IsolatedDevice
			kind  error
			msg   string
		}{
			{"existing device", []api.IsolatedDevice{slice(h.ID, "07", 0), slice(h.ID, "06", 0)}, ErrDuplicate,
				"isolated_devices[1]: isolated device with vendor_device_id 10de:1b38 and addr 06:00.0-0 already exists on host " + h.ID},
			{"one key twice", []api.IsolatedDevice{slice(h.ID, "07", 0), slice(h.ID, "07", 1), slice("gpu-1", "07", 0)}, ErrDuplicate,
				"isolated_devices[2]: isolated device with vendor_device_id 10de:1b38 and addr 07:00.0-0 is isolated_devices[0] too"},
			{"unknown host", []api.IsolatedDevice{slice(h.ID, "07", 0), slice("gpu-9", "07", 1)}, ErrNotFound,
				`isolated_devices[1]: host "gpu-9" not found`},
			{"field too long", []api.IsolatedDevice{slice(h.ID, "07", 0), long}, ErrInvalid,
				"isolated_devices[1]: field model: 513 bytes, longer than the 512 allowed"},
			{"field missing", []api.IsolatedDevice{slice(h.ID, "07", 0), noAddr}, ErrInvalid,
				"isolated_devices[1]: missing required field addr"},
			{"id given", []api.IsolatedDevice{slice(h.ID, "07", 0), withID}, ErrInvalid,
				"isolated_devices[1]: id is assigned by the server"},
			{"too many", make([]api.IsolatedDevice, MaxCreateDevices+1), ErrInvalid,
				"at most 1000 isolated devices at once, not 1001"},
		} {
			_, err := s.CreateDevices(ctx, tc.batch)
			if !errors.Is(err, tc.kind) || err.Error() != tc.msg {
				t.Errorf("%s: %v\nwant %v: %s", tc.name, err, tc.kind, tc.msg)
			}
		}
		if _, total, _ := s.ListDevices(ctx, DeviceFilter{}); total != len(batch) {
			t.Errorf("%d devices after the refused batches, want %d", total, len(batch))
		}
		checkCounts(t, s)
	})
}

func ptr[T any](v T) *T { return &v }
