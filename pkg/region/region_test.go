package region

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/cloudpods"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/keystone"
	"yunion.io/x/mps-daemon/pkg/pci"
)

// These tests run against Cloudpods' real keystone and region (started by
// internal/testsupport/cloudpods); each uses host records of its own.
func TestMain(m *testing.M) { cloudpods.Main(m) }

var macSeq atomic.Int32

// newMAC is a MAC no other test of this binary uses.
func newMAC() string {
	n := macSeq.Add(1)
	return fmt.Sprintf("02:00:00:11:%02x:%02x", n>>8&0xff, n&0xff)
}

var hostSeq, madeHosts atomic.Int32

// newHost is a host name starting with prefix and an access IP that no
// other host record of this binary has: the region refuses a second record
// with the same name, access_ip or manager_uri (made from the IP), so fixed
// ones made a test fail on its second run in one process (-count=20,
// scripts/flake-hunt.sh).
func newHost(prefix string) (name, ip string) {
	n := hostSeq.Add(1)
	return fmt.Sprintf("%s-%d", prefix, n), fmt.Sprintf("127.1.%d.%d", n>>8&0xff, n&0xff)
}

func newBackend(t *testing.T, c *cloudpods.Cloud, mac string, o Options) *Backend {
	t.Helper()
	ks, err := keystone.New(keystone.Options{Credentials: keystone.Credentials{
		AuthURL: c.AuthURL, User: c.User, Password: c.Password, Project: c.Project, Region: c.RegionName,
	}})
	if err != nil {
		t.Fatal(err)
	}
	o.Keystone = ks
	o.NICs = func() ([]NIC, error) { return []NIC{{Name: "test", MAC: mac}}, nil }
	o.Log = slog.New(slog.DiscardHandler)
	b, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// slices are n virtual devices of a GPU as the agent plans them.
func slices(uuid, bus string, n, totalMiB int) []api.IsolatedDevice {
	var out []api.IsolatedDevice
	for i := 0; i < n; i++ {
		out = append(out, api.IsolatedDevice{
			DevType: api.DevTypeNvidiaMPS, Model: "NVIDIA H100 80GB HBM3", Addr: fmt.Sprintf("%s-%d", bus, i),
			VendorDeviceID: "10de:2330", DevicePath: uuid, NumaNode: 0,
			PCIEInfo: &api.PCIEInfo{LaneWidth: 16, Throughput: "63.01 GB/s", TransferRatePerLane: "32GT/s", Version: "5.0"},
			Index:    -1, DeviceMinor: -1, MPSMemoryLimit: totalMiB / n, MPSMemoryTotal: totalMiB, MPSThreadPercentage: 100 / n,
		})
	}
	return out
}

func TestHostRecordFoundByMACNeverDuplicated(t *testing.T) {
	c := cloudpods.GetOrReplay(t, "region")
	ctx := context.Background()
	mac := newMAC()
	b := newBackend(t, c, mac, Options{})
	nameA, ipA := newHost("gpu-a")
	_, err := b.EnsureHost(ctx, nameA)
	if !errors.Is(err, ErrNoHostRecord) || !strings.Contains(err.Error(), mac) || !strings.Contains(err.Error(), "mps_region_create_host") {
		t.Fatalf("no host record yet: %v", err)
	}
	id, err := c.CreateHost(ctx, nameA, mac, ipA)
	if err != nil {
		t.Fatal(err)
	}
	h, err := b.EnsureHost(ctx, "some-other-name")
	if err != nil || h.ID != id || h.Name != nameA {
		t.Fatalf("host %+v err %v, want the record %s the host agent made", h, err, id)
	}
	// Two machines' MACs that belong to different records: no guessing.
	other := newMAC()
	nameB, ipB := newHost("gpu-b")
	if _, err := c.CreateHost(ctx, nameB, other, ipB); err != nil {
		t.Fatal(err)
	}
	b2 := newBackend(t, c, mac, Options{})
	b2.o.NICs = func() ([]NIC, error) { return []NIC{{MAC: mac}, {MAC: other}}, nil }
	if _, err := b2.EnsureHost(ctx, "x"); err == nil || !strings.Contains(err.Error(), "mps_region_host_mac") {
		t.Fatalf("two records for two MACs: %v", err)
	}
}

func TestCreateHostOnlyWhenAsked(t *testing.T) {
	c := cloudpods.GetOrReplay(t, "region")
	ctx := context.Background()
	mac := newMAC()
	b := newBackend(t, c, mac, Options{CreateHost: true})
	// The region makes the record on the network holding the address:
	// cloudpods-up.sh's hostnet0, 127.0.0.1-254.
	name, _ := newHost("made-by-mps")
	ip := fmt.Sprintf("127.0.0.%d", 100+madeHosts.Add(1)%150)
	b.o.NICs = func() ([]NIC, error) { return []NIC{{Name: "eth9", MAC: mac, IP: ip}}, nil }
	h, err := b.EnsureHost(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	again, err := b.EnsureHost(ctx, name)
	if err != nil || again.ID != h.ID {
		t.Fatalf("second EnsureHost: %+v %v, want the record just made (%s)", again, err, h.ID)
	}
}

// The region of the test (Cloudpods master) speaks the GPU-row model: one
// row per GPU, resized in place, purged when the GPU leaves, kept while a
// guest holds one of its slices, with virtual_num never under what is
// attached.
func TestGPURowsResizeAndHeld(t *testing.T) {
	c := cloudpods.GetOrReplay(t, "region")
	ctx := context.Background()
	mac := newMAC()
	name, ip := newHost("gpu-rows")
	hostID, err := c.CreateHost(ctx, name, mac, ip)
	if err != nil {
		t.Fatal(err)
	}
	models, err := pci.LoadModels("../pci/testdata/pci.ids")
	if err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, c, mac, Options{Models: models})
	desired := append(slices("GPU-a1", "18:00.0", 4, 81920), slices("GPU-a2", "2a:00.0", 2, 81920)...)
	res, err := b.SyncDevices(ctx, hostID, desired)
	if err != nil {
		t.Fatal(err)
	}
	if b.Model() != ModelGPU || res.Created != 2 || len(res.Devices) != 6 {
		t.Fatalf("model %s, created %d rows, %d devices; want gpu, 2, 6", b.Model(), res.Created, len(res.Devices))
	}
	rows := c.HostDevices(t, hostID)
	r := rows["18:00.0"]
	if len(rows) != 2 || r.Model != "H100 SXM5 80GB" || r.DevType != "GPU" || r.SharingMode != "MPS" || r.VirtualNum != 4 || r.MemorySize != 20480 || r.MPSMemoryLimit != 20480 || r.DevicePath != "GPU-a1" {
		t.Fatalf("rows %+v", rows)
	}
	if res, err = b.SyncDevices(ctx, hostID, desired); err != nil || res.Unchanged != 2 || res.Created+res.Updated+res.Deleted != 0 {
		t.Fatalf("second sync: %+v %v, want nothing changed", res, err)
	}

	// A guest takes a slice of the first GPU, then the GPU shrinks to 1
	// and the second GPU leaves: the held row stays (virtual_num kept at
	// the one attached), the free row goes.
	guest, err := c.CreateGuest(ctx, name+"-pod", hostID)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AttachDevice(ctx, guest, r.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.AttachDevice(ctx, guest, r.ID); err == nil {
		t.Fatal("one guest attached the same GPU row twice")
	}
	other, err := c.CreateGuest(ctx, name+"-pod-2", hostID)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AttachDevice(ctx, other, r.ID); err != nil {
		t.Fatal(err)
	}
	res, err = b.SyncDevices(ctx, hostID, slices("GPU-a1", "18:00.0", 1, 81920))
	if err != nil {
		t.Fatal(err)
	}
	rows = c.HostDevices(t, hostID)
	if len(rows) != 1 || rows["18:00.0"].ID != r.ID || rows["18:00.0"].VirtualNum != 2 || rows["18:00.0"].MemorySize != 81920 {
		t.Fatalf("after the shrink: %+v, want the held row only, virtual_num 2 (attached), memory 81920", rows)
	}
	held := 0
	for _, d := range res.Devices {
		if d.GuestID != "" {
			held++
		}
	}
	if res.Deleted != 1 || held != 2 || len(res.Devices) != 2 {
		t.Fatalf("sync result %+v: want 1 purged, 2 slices held", res)
	}
	// The GPU leaves altogether: the held row is kept, nothing else.
	res, err = b.SyncDevices(ctx, hostID, nil)
	if err != nil || len(res.Held) != 1 || len(c.HostDevices(t, hostID)) != 1 {
		t.Fatalf("GPU gone while held: %+v %v", res, err)
	}
	for _, g := range []string{guest, other} {
		if err := c.DetachAll(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	if res, err = b.SyncDevices(ctx, hostID, nil); err != nil || res.Deleted != 1 || len(c.HostDevices(t, hostID)) != 0 {
		t.Fatalf("released: %+v %v, want the row purged", res, err)
	}
}

// The per-slice model (Cloudpods 4.0.3): this region refuses NVIDIA_MPS rows
// unless an isolated-device model defines the type, and then keeps them.
func TestPerSliceRowsRefusedThenAcceptedWithADeviceModel(t *testing.T) {
	c := cloudpods.GetOrReplay(t, "region")
	ctx := context.Background()
	mac := newMAC()
	name, ip := newHost("gpu-slices")
	hostID, err := c.CreateHost(ctx, name, mac, ip)
	if err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, c, mac, Options{Model: ModelPerSlice})
	desired := slices("GPU-s1", "5d:00.0", 2, 81920)
	_, err = b.SyncDevices(ctx, hostID, desired)
	if err == nil || !strings.Contains(err.Error(), "NVIDIA_MPS") {
		t.Fatalf("per-slice rows on a GPU-row region: %v, want the region's refusal", err)
	}
	const model = "H100 SXM5 80GB (MPS slices)"
	if err := c.CreateDeviceModel(ctx, model, "NVIDIA_MPS", "10de", "2330"); err != nil {
		t.Fatal(err)
	}
	// The region as it was, for the next run in this process: no rows of
	// the model, then no model (its first step above needs the refusal).
	t.Cleanup(func() {
		if _, err := b.SyncDevices(ctx, hostID, nil); err != nil {
			t.Errorf("removing the test's rows: %v", err)
		}
		if err := c.DeleteDeviceModel(ctx, model); err != nil {
			t.Error(err)
		}
	})
	res, err := b.SyncDevices(ctx, hostID, desired)
	if err != nil || res.Created != 2 {
		t.Fatalf("with a device model: %+v %v", res, err)
	}
	rows := c.HostDevices(t, hostID)
	if rows["5d:00.0-0"].DevType != "NVIDIA_MPS" || rows["5d:00.0-1"].MPSMemoryLimit != 40960 {
		t.Fatalf("rows %+v", rows)
	}
	if res, err = b.SyncDevices(ctx, hostID, desired[:1]); err != nil || res.Deleted != 1 || res.Unchanged != 1 {
		t.Fatalf("shrink to 1: %+v %v", res, err)
	}
}
