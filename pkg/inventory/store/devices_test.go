package store

import (
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"yunion.io/x/mps-daemon/pkg/api"
)

func TestDeviceCRUD(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		h := mustHost(t, s, "gpu-1")

		// Created by host name: the row carries the host's id.
		in := slice("gpu-1", "1a", 0)
		d := mustDevice(t, s, in)
		if _, err := uuid.Parse(d.ID); err != nil {
			t.Errorf("id %q is not a uuid: %v", d.ID, err)
		}
		if d.HostID != h.ID {
			t.Errorf("host_id = %q, want the host's id %q", d.HostID, h.ID)
		}
		got, err := s.GetDevice(ctx, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, d) {
			t.Errorf("read back\n%+v\nwant\n%+v", got, d)
		}

		// A device without pcie_info reads back without it.
		noPCIE := slice(h.ID, "1a", 1)
		noPCIE.PCIEInfo = nil
		if got := mustDevice(t, s, noPCIE); got.PCIEInfo != nil {
			t.Errorf("pcie_info = %+v, want nil", got.PCIEInfo)
		}

		guest, model, limit := "guest-1", "Tesla P40 (new)", 1000
		up, err := s.UpdateDevice(ctx, d.ID, DeviceUpdate{
			ID: &d.ID, HostID: &d.HostID, CreatedAt: &d.CreatedAt, // echoed unchanged: accepted
			GuestID: &guest, Model: &model, MPSMemoryLimit: &limit, SetPCIEInfo: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		want := d
		want.GuestID, want.Model, want.MPSMemoryLimit, want.PCIEInfo, want.UpdatedAt = guest, model, limit, nil, up.UpdatedAt
		want.Guest = guest   // details follow the row
		want.UpdateVersion++ // every update counts, as in Cloudpods
		if !reflect.DeepEqual(up, want) {
			t.Errorf("updated\n%+v\nwant\n%+v", up, want)
		}
		if got, _ := s.GetDevice(ctx, d.ID); !reflect.DeepEqual(got, up) {
			t.Errorf("update not stored: %+v", got)
		}

		if _, err := s.DeleteDevice(ctx, d.ID); !errors.Is(err, ErrNotEmpty) || err.Error() != api.MsgDeviceUsedByServer {
			t.Fatalf("delete of a held device: %v, want ErrNotEmpty %q", err, api.MsgDeviceUsedByServer)
		}
		if _, err := s.GetDevice(ctx, d.ID); err != nil {
			t.Fatalf("held device gone after refused delete: %v", err)
		}
		free := ""
		if _, err := s.UpdateDevice(ctx, d.ID, DeviceUpdate{GuestID: &free}); err != nil {
			t.Fatal(err)
		}
		if gone, err := s.DeleteDevice(ctx, d.ID); err != nil || gone.ID != d.ID || gone.GuestID != "" {
			t.Fatalf("delete of a released device: %+v, %v; want the device as it was", gone, err)
		}
		if _, err := s.GetDevice(ctx, d.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetDevice after delete: %v, want ErrNotFound", err)
		}
		if _, err := s.DeleteDevice(ctx, d.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("second delete: %v, want ErrNotFound", err)
		}
	})
}

func TestDeviceRefusals(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		h := mustHost(t, s, "gpu-1")
		h2 := mustHost(t, s, "gpu-2")
		d := mustDevice(t, s, slice(h.ID, "06", 0))
		mustDevice(t, s, slice(h.ID, "06", 1))

		with := func(edit func(*api.IsolatedDevice)) api.IsolatedDevice {
			d := slice(h.ID, "07", 0)
			edit(&d)
			return d
		}
		create := func(d api.IsolatedDevice) func() error {
			return func() error { _, err := s.CreateDevice(ctx, d); return err }
		}
		update := func(u DeviceUpdate) func() error {
			return func() error { _, err := s.UpdateDevice(ctx, d.ID, u); return err }
		}
		otherAddr, empty, pct, otherTime := "06:00.0-1", "", 101, d.CreatedAt.Add(time.Second)
		tests := []struct {
			name    string
			call    func() error
			want    error
			wantMsg string
		}{
			{"duplicate", create(slice(h.ID, "06", 0)), ErrDuplicate, ""},
			{"unknown host", create(slice("no-such-host", "06", 0)), ErrNotFound, `host "no-such-host" not found`},
			{"missing host_id", create(with(func(d *api.IsolatedDevice) { d.HostID = "" })), ErrInvalid, "missing required field host_id"},
			{"missing dev_type", create(with(func(d *api.IsolatedDevice) { d.DevType = "" })), ErrInvalid, "missing required field dev_type"},
			{"missing addr", create(with(func(d *api.IsolatedDevice) { d.Addr = "" })), ErrInvalid, "missing required field addr"},
			{"missing vendor_device_id", create(with(func(d *api.IsolatedDevice) { d.VendorDeviceID = "" })), ErrInvalid, "missing required field vendor_device_id"},
			{"id given", create(with(func(d *api.IsolatedDevice) { d.ID = uuid.NewString() })), ErrInvalid, ""},
			{"thread percentage over 100", create(with(func(d *api.IsolatedDevice) { d.MPSThreadPercentage = 101 })), ErrInvalid, ""},
			{"update onto another row's key", update(DeviceUpdate{Addr: &otherAddr}), ErrDuplicate, ""},
			{"update clears addr", update(DeviceUpdate{Addr: &empty}), ErrInvalid, "missing required field addr"},
			{"update bad percentage", update(DeviceUpdate{MPSThreadPercentage: &pct}), ErrInvalid, ""},
			{"update moves host", update(DeviceUpdate{HostID: &h2.ID}), ErrInvalid, "host_id cannot be changed"},
			{"update changes id", update(DeviceUpdate{ID: &otherAddr}), ErrInvalid, "id cannot be changed"},
			{"update changes created_at", update(DeviceUpdate{CreatedAt: &otherTime}), ErrInvalid, "created_at cannot be changed"},
			{"update unknown", func() error { _, err := s.UpdateDevice(ctx, "nope", DeviceUpdate{}); return err }, ErrNotFound, ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				err := tt.call()
				if !errors.Is(err, tt.want) {
					t.Fatalf("err = %v, want %v", err, tt.want)
				}
				if tt.wantMsg != "" && err.Error() != tt.wantMsg {
					t.Errorf("message = %q, want %q", err.Error(), tt.wantMsg)
				}
			})
		}
		if got, err := s.GetDevice(ctx, d.ID); err != nil || !reflect.DeepEqual(got, d) {
			t.Errorf("device changed by refused calls: %+v, %v", got, err)
		}
		if _, total, _ := s.ListDevices(ctx, DeviceFilter{}); total != 2 {
			t.Errorf("%d devices after refused creates, want 2", total)
		}
	})
}

// Many agents (or retries of one) registering the same slice at once must
// leave exactly one row, and every loser must see ErrDuplicate.
func TestConcurrentCreatesOfOneDevice(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		h := mustHost(t, s, "gpu-1")

		const n = 16
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { _, errs[i] = s.CreateDevice(ctx, slice(h.ID, "06", 0)) })
		}
		wg.Wait()
		ok := 0
		for i, err := range errs {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, ErrDuplicate):
				t.Errorf("goroutine %d: %v, want nil or ErrDuplicate", i, err)
			}
		}
		devs, total, err := s.ListDevices(ctx, DeviceFilter{HostID: h.ID, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if ok != 1 || total != 1 || len(devs) != 1 {
			t.Errorf("%d creates succeeded, %d rows (total %d); want exactly one", ok, len(devs), total)
		}
	})
}
