package store

import (
	"errors"
	"strings"
	"testing"

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
			{"dev_type", DeviceFilter{DevType: "NVIDIA_GPU_SHARE", Limit: 20}, "gpu-2/07:00.0-0", 1},
			{"model", DeviceFilter{Model: "NVIDIA H100", Limit: 20}, "gpu-1/1a:00.0-0 gpu-1/1a:00.0-1", 2},
			{"addr", DeviceFilter{Addr: "06:00.0-0", Limit: 20}, "gpu-1/06:00.0-0 gpu-2/06:00.0-0", 2},
			{"gpu", DeviceFilter{DevicePath: "GPU-1a", Limit: 20}, "gpu-1/1a:00.0-0 gpu-1/1a:00.0-1", 2},
			{"guest", DeviceFilter{GuestID: guest, Limit: 20}, "gpu-1/06:00.0-2", 1},
			{"unused on one GPU, paged", DeviceFilter{HostID: "gpu-1", DevicePath: "GPU-06", Unused: true, Limit: 2, Offset: 1},
				"gpu-1/06:00.0-1 gpu-1/06:00.0-3", 3},
			{"combined", DeviceFilter{HostID: "gpu-1", DevType: api.DevTypeNvidiaMPS, Model: "Tesla P40", Limit: 20},
				"gpu-1/06:00.0-0 gpu-1/06:00.0-1 gpu-1/06:00.0-2 gpu-1/06:00.0-3", 4},
			{"nothing matches", DeviceFilter{HostID: "gpu-2", Model: "NVIDIA H100", Limit: 20}, "", 0},
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

		t.Run("details fill the host name", func(t *testing.T) {
			devs, _, err := s.ListDevices(ctx, DeviceFilter{Details: true, Limit: 20})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range devs {
				if d.Host != names[d.HostID] || d.Guest != "" || d.GuestStatus != "" {
					t.Errorf("%s: host %q guest %q status %q; want host %q and no guest details",
						d.Addr, d.Host, d.Guest, d.GuestStatus, names[d.HostID])
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
