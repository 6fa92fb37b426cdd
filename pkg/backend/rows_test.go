package backend

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/golden"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/devsync"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/pci"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
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

// h200 is GPU i of a host of H200s, on bus bus.
func h200(i int, bus uint8) gpu.Info {
	return gpu.Info{
		Index: i, Minor: i, UUID: gpu.UUID("GPU-0000000" + string(rune('0'+i)) + "-aaaa-bbbb-cccc-dddddddddddd"), Name: "NVIDIA H200",
		PCI: pci.Address{Bus: bus}, PCIVendorID: 0x10de, PCIDeviceID: 0x2335, MemoryTotal: units.MiB(143771).Bytes(),
		Architecture: gpu.ArchHopper, NUMANode: -1, PCIeGeneration: 5, PCIeWidth: 16,
	}
}

// offerOf offers g split in n.
func offerOf(g gpu.Info, n int) Offer {
	var devs []cdi.Device
	for _, d := range vdev.Split(g, n, 100/n, vdev.QoS{}) {
		devs = append(devs, cdi.FromVirtual(d, "", "/run/pipe"))
	}
	return Offer{Host: "gpu-1", GPUs: []GPU{{VirtualNumber: n, Healthy: true, Devices: devs}}}
}

// The host is registered once per process, begun ahead of the first sync
// (while MPS is prepared); its id goes into every row and the answer. A
// failed registration is tried again at the next sync.
func TestRowsRegisterOnceAndSyncTheRows(t *testing.T) {
	ctx := context.Background()
	s := &store{}
	r := NewRows(ctx, s, "gpu-1", nil)
	o := offerOf(h200(0, 0x1a), 2)
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

// The rows a sync answers with are the backend's holdings, by device
// name: the id, the guest that holds it, pending removal; a row that is
// no slice of a GPU names no device and is left out.
func TestRowsAnswerTheHoldings(t *testing.T) {
	ctx := context.Background()
	g := h200(0, 0x1a)
	held := rowOf(vdev.Split(g, 4, 25, vdev.QoS{})[3], true)
	held.ID, held.GuestID, held.PendingRemoval = "d3", "pod-a", true
	s := &heldStore{held: held}
	a, err := NewRows(ctx, s, "", nil).Sync(ctx, offerOf(g, 2))
	if err != nil {
		t.Fatal(err)
	}
	want := []Holding{
		{Name: vdev.NameOf(g.UUID, 0), ID: "id-0", Healthy: true, CDIName: cdi.DeviceName(vdev.NameOf(g.UUID, 0)), MemoryLimit: 71885, ThreadPercentage: 50},
		{Name: vdev.NameOf(g.UUID, 1), ID: "id-1", Healthy: true, CDIName: cdi.DeviceName(vdev.NameOf(g.UUID, 1)), MemoryLimit: 71885, ThreadPercentage: 50},
		{Name: vdev.NameOf(g.UUID, 3), ID: "d3", Holder: "pod-a", Healthy: true, PendingRemoval: true, CDIName: cdi.DeviceName(vdev.NameOf(g.UUID, 3)), MemoryLimit: 35942, ThreadPercentage: 25},
	}
	if len(a.Devices) != len(want) || a.HeldOutOfPlan != 1 {
		t.Fatalf("answer %+v", a)
	}
	for i := range want {
		if a.Devices[i] != want[i] {
			t.Errorf("holding %d: %+v, want %+v", i, a.Devices[i], want[i])
		}
	}
}

// heldStore answers the desired rows with ids, then a held one and a GPU
// row (no slice).
type heldStore struct{ held api.IsolatedDevice }

func (s *heldStore) EnsureHost(_ context.Context, name string) (api.Host, error) {
	return api.Host{ID: "h", Name: name}, nil
}

func (s *heldStore) SyncDevices(_ context.Context, _ string, desired []api.IsolatedDevice) (devsync.Result, error) {
	var res devsync.Result
	for i, d := range desired {
		d.ID = "id-" + string(rune('0'+i))
		res.Devices = append(res.Devices, d)
	}
	res.Devices = append(res.Devices, s.held, api.IsolatedDevice{Addr: "1a:00.0", DevicePath: "GPU-x"})
	res.Held = []string{s.held.ID}
	return res, nil
}

// TestRowOf pins the inventory rows: the fields Cloudpods' tools read.
func TestRowOf(t *testing.T) {
	const p40Memory units.MiB = 24576
	p40 := gpu.Info{
		UUID: "GPU-76aef7ff-372d-2432-b4b4-beca4d8d3400", Name: "Tesla P40", PCI: pci.Address{Bus: 0, Device: 6},
		PCIVendorID: 0x10de, PCIDeviceID: 0x1b38, MemoryTotal: p40Memory.Bytes(), Architecture: gpu.ArchPascal,
		NUMANode: -1, PCIeGeneration: 3, PCIeWidth: 16,
	}
	noLink := h200(0, 0x1a)
	noLink.PCI, noLink.NUMANode, noLink.PCIeGeneration = pci.Address{Bus: 0x3b}, 1, 0
	var rows []any
	for _, d := range append(vdev.Split(p40, 2, 50, vdev.QoS{}), vdev.Split(noLink, 3, 33, vdev.QoS{})[2]) {
		r := rowOf(d, d.Index != 2)
		r.HostID = "197c1d98-316a-42e6-889d-68497153cc82" // the backend's to fill (Rows.Sync)
		rows = append(rows, r)
	}
	got, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "rows.golden.json", append(got, '\n'))
}
