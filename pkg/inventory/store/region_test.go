package store

import (
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
)

// Keystone tokens act for their API token, expire, go with their API token
// when it is revoked, and are never the API token itself.
func TestKeystoneTokens(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		apiTok, created := mustToken(t, s, NewToken{Name: "agent gpu-1", Role: RoleHost, Host: "gpu-1"})
		now := time.Now()
		manualUpkeep(t, s)
		s.now = func() time.Time { return now }

		whole, kt, err := s.CreateKeystoneToken(ctx, created.ID, "system", []string{"password"}, now.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`^mpsk_[0-9a-f]{16}_[0-9a-f]{64}$`).MatchString(whole) || strings.Contains(whole, apiTok[5:]) {
			t.Fatalf("keystone token %q is not mpsk_<id>_<secret> of its own", whole)
		}
		if !IsKeystoneToken(whole) || IsKeystoneToken(apiTok) {
			t.Errorf("IsKeystoneToken tells them apart wrongly")
		}
		got, err := s.VerifyKeystoneToken(ctx, whole)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != kt.ID || got.API.ID != created.ID || got.API.Role != RoleHost || got.API.Host != "gpu-1" ||
			got.Project != "system" || strings.Join(got.Methods, ",") != "password" {
			t.Errorf("verified %+v, want the token acting for %+v", got, created)
		}
		if _, err := s.VerifyToken(ctx, whole); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("a keystone token passed as an API token: %v", err)
		}
		if _, err := s.VerifyKeystoneToken(ctx, apiTok); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("an API token passed as a keystone token: %v", err)
		}
		wrong := whole[:len(whole)-1] + map[bool]string{true: "0", false: "1"}[whole[len(whole)-1] != '0']
		if _, err := s.VerifyKeystoneToken(ctx, wrong); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("a wrong secret passed: %v", err)
		}

		// Expired: refused; a new token's creation clears it from the table.
		s.now = func() time.Time { return now.Add(2 * time.Hour) }
		if _, err := s.VerifyKeystoneToken(ctx, whole); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("an expired token passed: %v", err)
		}
		second, _, err := s.CreateKeystoneToken(ctx, created.ID, "", []string{"token"}, now.Add(3*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		var rows int
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM keystone_tokens`).Scan(&rows); err != nil || rows != 1 {
			t.Errorf("keystone_tokens holds %d rows (%v), want only the live one", rows, err)
		}

		// Revoking one keystone token; then the API token takes the rest.
		third, _, _ := s.CreateKeystoneToken(ctx, created.ID, "", []string{"token"}, now.Add(3*time.Hour))
		if err := s.RevokeKeystoneToken(ctx, second); err != nil {
			t.Fatal(err)
		}
		if _, err := s.VerifyKeystoneToken(ctx, second); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("a revoked keystone token passed: %v", err)
		}
		if err := s.RevokeToken(ctx, created.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.VerifyKeystoneToken(ctx, third); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("the keystone token of a revoked API token passed: %v", err)
		}
		if _, _, err := s.CreateKeystoneToken(ctx, created.ID, "", nil, now.Add(time.Hour)); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("a keystone token was made for a revoked API token: %v", err)
		}
	})
}

// A device is found by id, else by name, by every call that names one; an
// unknown or shared name is a refusal a client can act on.
func TestDeviceByIDOrName(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		h := mustHost(t, s, "gpu-1")
		a := mustDevice(t, s, slice(h.ID, "06", 0))
		twin1, twin2 := slice(h.ID, "06", 1), slice(h.ID, "06", 2)
		twin1.Name, twin2.Name = "twin", "twin"
		mustDevice(t, s, twin1)
		mustDevice(t, s, twin2)
		// A device named with another device's id: the id wins.
		named := slice(h.ID, "06", 3)
		named.Name = a.ID
		impostor := mustDevice(t, s, named)
		for _, tt := range []struct {
			in, want string
			kind     error
		}{
			{a.ID, a.ID, nil},
			{a.Name, a.ID, nil},
			{"no-such-device", "", ErrNotFound},
			{"twin", "", ErrDuplicate},
		} {
			got, err := s.GetDevice(ctx, tt.in)
			if got.ID != tt.want || !errors.Is(err, tt.kind) || (tt.kind == nil) != (err == nil) {
				t.Errorf("GetDevice(%q) = %q, %v; want %q, %v", tt.in, got.ID, err, tt.want, tt.kind)
			}
		}
		_, err := s.GetDevice(ctx, "no-such-device")
		wantRefusal(t, err, ErrNotFound, "isolated_device no-such-device not found")
		_, err = s.UpdateDevice(ctx, "twin", DeviceUpdate{})
		wantRefusal(t, err, ErrDuplicate, "several isolated devices are named twin: name one by its id")

		// The writes resolve a name too, and answer the device named.
		model := "renamed-model"
		if up, err := s.UpdateDevice(ctx, a.Name, DeviceUpdate{Model: &model}); err != nil || up.ID != a.ID || up.Model != model {
			t.Errorf("UpdateDevice by name = %s %q, %v; want %s %q", up.ID, up.Model, err, a.ID, model)
		}
		if d, err := s.AttachDevice(ctx, "pod-1", a.Name); err != nil || d.ID != a.ID || d.GuestID != "pod-1" {
			t.Errorf("AttachDevice by name = %s held by %q, %v; want %s held by pod-1", d.ID, d.GuestID, err, a.ID)
		}
		if got, _ := s.GetDevice(ctx, a.ID); got.GuestID != "pod-1" {
			t.Errorf("after attach by name, device held by %q, want pod-1", got.GuestID)
		}
		if devs, err := s.DetachDevice(ctx, "pod-1", a.Name); err != nil || len(devs) != 1 || devs[0].ID != a.ID || devs[0].GuestID != "" {
			t.Errorf("DetachDevice by name = %+v, %v; want %s, free", devs, err, a.ID)
		}
		if gone, err := s.DeleteDevice(ctx, a.Name); err != nil || gone.ID != a.ID {
			t.Errorf("DeleteDevice by name = %s, %v; want %s", gone.ID, err, a.ID)
		}
		// With a gone, its id names the impostor by name.
		if got, err := s.GetDevice(ctx, a.ID); err != nil || got.ID != impostor.ID {
			t.Errorf("GetDevice(%q) after delete = %s, %v; want the device of that name", a.ID, got.ID, err)
		}
	})
}

// Every call that answers one device as stored answers it with its
// details, and what the answer says is what a later read says.
func TestDeviceDetails(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		h := mustHost(t, s, "gpu-1")
		in := slice(h.Name, "06", 0) // by the host's name
		in.GuestID = "pod-1"
		created := mustDevice(t, s, in)
		if created.Host != "gpu-1" || created.Vendor != VendorOf(in.VendorDeviceID) || created.Vendor == "" || created.Guest != "pod-1" {
			t.Errorf("created: host %q, vendor %q, guest %q; want gpu-1, %q, pod-1", created.Host, created.Vendor, created.Guest, VendorOf(in.VendorDeviceID))
		}
		got, err := s.GetDevice(ctx, created.ID)
		if err != nil || !reflect.DeepEqual(got, created) {
			t.Errorf("GetDevice = %+v, %v; want %+v", got, err, created)
		}
		free := ""
		up, err := s.UpdateDevice(ctx, created.ID, DeviceUpdate{GuestID: &free})
		if err != nil || up.Host != "gpu-1" || up.Guest != "" || up.Vendor != created.Vendor {
			t.Errorf("updated: host %q, vendor %q, guest %q, %v; want gpu-1, %q, none", up.Host, up.Vendor, up.Guest, err, created.Vendor)
		}
		if got, _ := s.GetDevice(ctx, created.ID); !reflect.DeepEqual(got, up) {
			t.Errorf("GetDevice after update = %+v, want %+v", got, up)
		}
	})
}

// What Cloudpods' host agent sends is stored and read back; what it leaves
// out gets Cloudpods' defaults; a device without a name is named as
// Cloudpods names one.
func TestCloudpodsDeviceFields(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		h := mustHost(t, s, "gpu-1")
		d := slice(h.ID, "06", 0)
		d.Name, d.SharingMode, d.HotPluggable, d.VirtualNum, d.MemorySize = "", "MPS", true, 4, 10240
		got := mustDevice(t, s, d)
		if !regexp.MustCompile(`^dev_gpu-1_[0-9]+$`).MatchString(got.Name) {
			t.Errorf("generated name %q, want dev_gpu-1_<nanoseconds>", got.Name)
		}
		read, err := s.GetDevice(ctx, got.ID)
		if err != nil {
			t.Fatal(err)
		}
		if read.SharingMode != "MPS" || !read.HotPluggable || read.VirtualNum != 4 || read.MemorySize != 10240 || read.UpdateVersion != 0 {
			t.Errorf("read back %+v", read)
		}
		plain := mustDevice(t, s, slice(h.ID, "06", 1))
		if plain.VirtualNum != 1 || plain.SharingMode != "" {
			t.Errorf("defaults: virtual_num %d sharing_mode %q, want 1 and none", plain.VirtualNum, plain.SharingMode)
		}

		// An empty name and a zero virtual_num in an update change nothing.
		empty, zero, mode := "", 0, "EXCLUSIVE"
		up, err := s.UpdateDevice(ctx, got.ID, DeviceUpdate{Name: &empty, VirtualNum: &zero, SharingMode: &mode})
		if err != nil {
			t.Fatal(err)
		}
		if up.Name != got.Name || up.VirtualNum != 4 || up.SharingMode != "EXCLUSIVE" || up.UpdateVersion != 1 {
			t.Errorf("after update %+v", up)
		}
		// Attaching and detaching are not updates of the row (Cloudpods
		// keeps them in another table).
		if _, err := s.AttachDevice(ctx, "pod-1", got.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DetachDevice(ctx, "pod-1", got.ID); err != nil {
			t.Fatal(err)
		}
		if again, _ := s.GetDevice(ctx, got.ID); again.UpdateVersion != 1 {
			t.Errorf("update_version %d after attach and detach, want 1", again.UpdateVersion)
		}

		bad := slice(h.ID, "06", 9)
		bad.SharingMode = "SHARED"
		_, err = s.CreateDevice(ctx, bad)
		wantRefusal(t, err, ErrInvalid, `sharing_mode "SHARED" is not one of`)
	})
}

// Every string field is bounded (Cloudpods' column widths); a longer value
// is refused naming the field, and nothing is stored.
func TestFieldBounds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		h := mustHost(t, s, "gpu-1")
		long := func(n int) string { return strings.Repeat("x", n) }
		for _, tt := range []struct {
			field string
			set   func(d *api.IsolatedDevice)
		}{
			{"name", func(d *api.IsolatedDevice) { d.Name = long(129) }},
			{"model", func(d *api.IsolatedDevice) { d.Model = long(900 << 10) }},
			{"dev_type", func(d *api.IsolatedDevice) { d.DevType = long(129) }},
			{"addr", func(d *api.IsolatedDevice) { d.Addr = long(17) }},
			{"vendor_device_id", func(d *api.IsolatedDevice) { d.VendorDeviceID = long(17) }},
			{"device_path", func(d *api.IsolatedDevice) { d.DevicePath = long(129) }},
			{"render_path", func(d *api.IsolatedDevice) { d.RenderPath = long(129) }},
			{"mdev_id", func(d *api.IsolatedDevice) { d.MdevID = long(37) }},
			{"cdi_name", func(d *api.IsolatedDevice) { d.CDIName = long(257) }},
			{"host_id", func(d *api.IsolatedDevice) { d.HostID = long(129) }},
		} {
			d := slice(h.ID, "06", 0)
			tt.set(&d)
			_, err := s.CreateDevice(ctx, d)
			wantRefusal(t, err, ErrInvalid, "field "+tt.field+": ")
			_, err = s.CreateDevices(ctx, []api.IsolatedDevice{d})
			wantRefusal(t, err, ErrInvalid, "field "+tt.field+": ")
		}
		ok := slice(h.ID, "06", 0)
		ok.Model, ok.Name = long(512), long(128)
		created := mustDevice(t, s, ok)
		tooLong := long(513)
		_, err := s.UpdateDevice(ctx, created.ID, DeviceUpdate{Model: &tooLong})
		wantRefusal(t, err, ErrInvalid, "field model: 513 bytes, longer than the 512 allowed")

		_, err = s.CreateHost(ctx, api.Host{Name: long(1 << 20)})
		wantRefusal(t, err, ErrInvalid, "field name: ")
		_, err = s.CreateHost(ctx, api.Host{Name: "h", AccessMAC: long(33)})
		wantRefusal(t, err, ErrInvalid, "field access_mac: ")
		_, err = s.UpdateHost(ctx, "gpu-1", HostUpdate{AccessIP: ptr(long(65))})
		wantRefusal(t, err, ErrInvalid, "field access_ip: ")
		if _, total, _ := s.ListHosts(ctx, HostFilter{Limit: 10}); total != 1 {
			t.Errorf("%d hosts, want only gpu-1", total)
		}
	})
}

// A host agent finds its host by the MAC of its access interface, in any
// case.
func TestHostsByMAC(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		h, err := s.CreateHost(ctx, api.Host{Name: "gpu-1", AccessMAC: "02:00:00:00:AB:01", HostType: "container"})
		if err != nil {
			t.Fatal(err)
		}
		mustHost(t, s, "gpu-2")
		for _, mac := range []string{"02:00:00:00:ab:01", "02:00:00:00:AB:01"} {
			got, total, err := s.ListHosts(ctx, HostFilter{AnyMAC: mac, Limit: 10})
			if err != nil || total != 1 || got[0].ID != h.ID || got[0].AccessMAC != "02:00:00:00:ab:01" {
				t.Errorf("any_mac %s: %+v total %d (%v)", mac, got, total, err)
			}
		}
		if _, total, _ := s.ListHosts(ctx, HostFilter{AnyMAC: "02:00:00:00:00:99", Limit: 10}); total != 0 {
			t.Errorf("an unknown MAC found %d hosts", total)
		}
	})
}
