package dra

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/ledger"
	"yunion.io/x/mps-daemon/pkg/pci"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

const (
	uuidA = "GPU-81df1fb7-5946-da34-7f70-c730b0456642"
	uuidB = "GPU-0c7b1e2a-1111-2222-3333-444455556666"
)

// recorder is a Publisher that keeps what it was given.
type recorder struct {
	mu    sync.Mutex
	pools []resourceslice.DriverResources
	err   error
}

func (r *recorder) PublishResources(_ context.Context, res resourceslice.DriverResources) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	r.pools = append(r.pools, res)
	return nil
}

// names are the device names of the last publication.
func (r *recorder) names(t *testing.T) []string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pools) == 0 {
		t.Fatal("nothing published")
	}
	var out []string
	for _, s := range r.pools[len(r.pools)-1].Pools["node-1"].Slices {
		for _, d := range s.Devices {
			out = append(out, d.Name)
		}
	}
	return out
}

// waitNames waits until the last publication has these devices (an
// unprepare publishes in the background); a minute without fails.
func (r *recorder) waitNames(t *testing.T, want []string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		r.mu.Lock()
		var got []string
		if len(r.pools) > 0 {
			for _, s := range r.pools[len(r.pools)-1].Pools["node-1"].Slices {
				for _, d := range s.Devices {
					got = append(got, d.Name)
				}
			}
		}
		r.mu.Unlock()
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("published %v, want %v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *recorder) device(t *testing.T, name string) resourceapi.Device {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.pools[len(r.pools)-1].Pools["node-1"].Slices {
		for _, d := range s.Devices {
			if d.Name == name {
				return d
			}
		}
	}
	t.Fatalf("device %s not published", name)
	return resourceapi.Device{}
}

// capacity is the device's capacity name as a number.
func capacity(d resourceapi.Device, name resourceapi.QualifiedName) int64 {
	q := d.Capacity[name].Value
	return q.Value()
}

// slicesOf is GPU uuid (PCI device dev, minor minor) in n fixed slices of
// memMiB each, as the agent offers it.
func slicesOf(uuid string, dev uint8, minor, n int, memMiB units.MiB, healthy bool) backend.GPU {
	g := gpu.Info{UUID: gpu.UUID(uuid), Minor: minor, Name: "NVIDIA H100 80GB HBM3", PCI: pci.Address{Device: dev}}
	out := backend.GPU{Sharing: config.SharingSlices, VirtualNumber: n, Healthy: healthy}
	for i := range n {
		d := vdev.Device{GPU: g, Index: i, MemoryLimit: memMiB, ThreadPercentage: 100 / n}
		out.Devices = append(out.Devices, cdi.FromVirtual(d, "", "/run/yunion-mps/"+uuid))
	}
	return out
}

// offerOf is a reconcile's offer of GPUs (of fixed slices).
func offerOf(gpus ...backend.GPU) backend.Offer { return backend.Offer{GPUs: gpus} }

func newDriver(t *testing.T, path string) (*Driver, *recorder) {
	t.Helper()
	d, err := New(Options{NodeName: "node-1", CheckpointPath: path, DriverVersion: "580.159.04"})
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	t.Cleanup(d.setPublisher(t.Context(), r, nil))
	return d, r
}

func claimOn(uid, device string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c-" + uid, UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: DefaultDriverName, Pool: "node-1", Device: device}},
		}}},
	}
}

func TestDeviceNameIsADNSLabel(t *testing.T) {
	for _, tc := range []struct{ uuid, want string }{
		{uuidA, "gpu-81df1fb7-5946-da34-7f70-c730b0456642-3"},
		{"MIG-GPU/x_y", "mig-gpu-x-y-3"},
		{"GPU-0123456789012345678901234567890123456789012345678901234567890123", "gpu-012345678901234567890123456789012345678901234567890123456-3"},
	} {
		got := ledger.DeviceName(tc.uuid, 3)
		if got != tc.want || len(got) > 63 {
			t.Errorf("ledger.DeviceName(%q) = %q (%d), want %q", tc.uuid, got, len(got), tc.want)
		}
	}
}

func TestNothingIsPublishedBeforeTheFirstReconcile(t *testing.T) {
	_, r := newDriver(t, filepath.Join(t.TempDir(), "cp.json"))
	if len(r.pools) != 0 {
		t.Fatalf("published before the agent said what there is: %+v", r.pools)
	}
}

func TestSlicesCarryAttributesAndCapacity(t *testing.T) {
	d, r := newDriver(t, filepath.Join(t.TempDir(), "cp.json"))
	if _, err := d.Sync(t.Context(), offerOf(slicesOf(uuidA, 0x06, 0, 2, 40779, true))); err != nil {
		t.Fatal(err)
	}
	dev := r.device(t, ledger.DeviceName(uuidA, 1))
	if got := *dev.Attributes[AttrUUID].StringValue; got != uuidA {
		t.Errorf("uuid %q", got)
	}
	if got := *dev.Attributes[AttrIndex].IntValue; got != 1 {
		t.Errorf("index %d", got)
	}
	if got := *dev.Attributes[AttrSharing].StringValue; got != "slices" {
		t.Errorf("sharing %q, want the device YAML's slices", got)
	}
	if got := *dev.Attributes[AttrDriverVersion].StringValue; got != "580.159.04" {
		t.Errorf("driverVersion %q", got)
	}
	if got := capacity(dev, CapMemory); got != 40779<<20 {
		t.Errorf("memory %d bytes, want %d", got, 40779<<20)
	}
	if got := capacity(dev, CapThreads); got != 50 {
		t.Errorf("threads %d", got)
	}
}

// A GPU whose MPS is not serving keeps its devices published, tainted so
// that the scheduler allocates none (DRADeviceTaints), and the kubelet's
// health stream says so for each, the prepared one included; a free one
// is not prepared. Healthy again, the taints go. A removed GPU's free
// devices are withdrawn.
func TestUnhealthyGPUsDevicesAreTainted(t *testing.T) {
	d, r := newDriver(t, filepath.Join(t.TempDir(), "cp.json"))
	desired := offerOf(slicesOf(uuidA, 0x06, 0, 2, 40779, true), slicesOf(uuidB, 0x07, 1, 2, 40779, true))
	if _, err := d.Sync(t.Context(), desired); err != nil {
		t.Fatal(err)
	}
	reports := watchHealth(t, d)
	if h := waitHealth(t, reports, ledger.DeviceName(uuidB, 1), kubeletplugin.HealthStatusHealthy); len(h) != 4 {
		t.Fatalf("first health report %v, want 4 devices", h)
	}
	if _, err := d.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{claimOn("u1", ledger.DeviceName(uuidB, 0))}); err != nil {
		t.Fatal(err)
	}
	sick := offerOf(slicesOf(uuidA, 0x06, 0, 2, 40779, true), slicesOf(uuidB, 0x07, 1, 2, 40779, false))
	if _, err := d.Sync(t.Context(), sick); err != nil {
		t.Fatal(err)
	}
	want := []string{ledger.DeviceName(uuidB, 0), ledger.DeviceName(uuidB, 1), ledger.DeviceName(uuidA, 0), ledger.DeviceName(uuidA, 1)}
	slices.Sort(want)
	got := r.names(t)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("published %v, want %v (an unhealthy GPU's devices stay, tainted)", got, want)
	}
	for _, name := range want {
		taints := r.device(t, name).Taints
		onB := strings.Contains(name, "0c7b1e2a")
		if onB != (len(taints) == 1) || (onB && (taints[0].Key != "mps.yunion.io/unhealthy" || taints[0].Effect != resourceapi.DeviceTaintEffectNoSchedule)) {
			t.Errorf("device %s taints %+v", name, taints)
		}
	}
	h := waitHealth(t, reports, ledger.DeviceName(uuidB, 0), kubeletplugin.HealthStatusUnhealthy)
	for name, st := range h {
		if want := map[bool]kubeletplugin.HealthStatus{true: kubeletplugin.HealthStatusUnhealthy, false: kubeletplugin.HealthStatusHealthy}[strings.Contains(name, "0c7b1e2a")]; st != want {
			t.Errorf("health of %s: %s, want %s", name, st, want)
		}
	}
	res, err := d.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{claimOn("u2", ledger.DeviceName(uuidB, 1))})
	if err != nil || res["u2"].Err == nil || !containsStr(res["u2"].Err.Error(), "is not serving") {
		t.Errorf("prepare on an unhealthy GPU: %v %v", err, res["u2"].Err)
	}
	if _, err := d.Sync(t.Context(), desired); err != nil {
		t.Fatal(err)
	}
	if taints := r.device(t, ledger.DeviceName(uuidB, 1)).Taints; len(taints) != 0 {
		t.Errorf("healthy again, still tainted: %+v", taints)
	}
	waitHealth(t, reports, ledger.DeviceName(uuidB, 0), kubeletplugin.HealthStatusHealthy)
	// GPU B removed: its free device is withdrawn, the held one stays.
	if _, err := d.Sync(t.Context(), offerOf(slicesOf(uuidA, 0x06, 0, 2, 40779, true))); err != nil {
		t.Fatal(err)
	}
	want = []string{ledger.DeviceName(uuidB, 0), ledger.DeviceName(uuidA, 0), ledger.DeviceName(uuidA, 1)}
	slices.Sort(want)
	got = r.names(t)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("published %v, want %v (GPU B's free device withdrawn, its held one kept)", got, want)
	}
	if h := waitHealth(t, reports, ledger.DeviceName(uuidB, 0), kubeletplugin.HealthStatusUnknown); len(h) != 3 {
		t.Errorf("a held device of a GPU out of the plan is Unknown; the report: %v", h)
	}
}

func TestPreparedDeviceIsKeptAsItWasThroughAResize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.json")
	d, r := newDriver(t, path)
	if _, err := d.Sync(t.Context(), offerOf(slicesOf(uuidA, 0x06, 0, 4, 20389, true))); err != nil {
		t.Fatal(err)
	}
	held := ledger.DeviceName(uuidA, 3)
	res, err := d.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{claimOn("u1", held)})
	if err != nil || res["u1"].Err != nil {
		t.Fatalf("prepare: %v %v", err, res["u1"].Err)
	}
	if got := res["u1"].Devices[0].CDIDeviceIDs; !slices.Equal(got, []string{"yunion.io/mps-gpu=" + uuidA + "::3"}) {
		t.Errorf("CDI names %v", got)
	}
	// Resize 4 -> 2: devices 0 and 1 grow, 2 goes, 3 is held.
	sync, err := d.Sync(t.Context(), offerOf(slicesOf(uuidA, 0x06, 0, 2, 40779, true)))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{ledger.DeviceName(uuidA, 0), ledger.DeviceName(uuidA, 1), held}
	if got := r.names(t); !slices.Equal(got, want) {
		t.Errorf("published %v, want %v", got, want)
	}
	if got := capacity(r.device(t, held), CapMemory); got != 20389<<20 {
		t.Errorf("held device's memory changed under its claim: %d", got)
	}
	if got := capacity(r.device(t, ledger.DeviceName(uuidA, 0)), CapMemory); got != 40779<<20 {
		t.Errorf("free device not resized: %d", got)
	}
	// The agent is told the held device is the claim's, pending removal, so
	// it keeps its CDI entry.
	var heldDev *backend.Holding
	for i := range sync.Devices {
		if sync.Devices[i].Name == vdev.NameOf(uuidA, 3) {
			heldDev = &sync.Devices[i]
		}
	}
	if heldDev == nil || heldDev.Holder != "u1" || !heldDev.PendingRemoval || heldDev.MemoryLimit != 20389 || heldDev.ID != "" {
		t.Fatalf("held device to the agent: %+v", heldDev)
	}

	// A restart reads the claim back and publishes the same devices.
	d2, r2 := newDriver(t, path)
	if _, err := d2.Sync(t.Context(), offerOf(slicesOf(uuidA, 0x06, 0, 2, 40779, true))); err != nil {
		t.Fatal(err)
	}
	if got := r2.names(t); !slices.Equal(got, want) {
		t.Errorf("after a restart published %v, want %v", got, want)
	}
	// Prepare again (the kubelet repeats itself): the same answer.
	res2, err := d2.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{claimOn("u1", held)})
	if err != nil || !slices.Equal(res2["u1"].Devices[0].CDIDeviceIDs, res["u1"].Devices[0].CDIDeviceIDs) {
		t.Fatalf("prepare again: %v %+v", err, res2["u1"])
	}
	// Unprepare twice: the device leaves with the plan, the second is no error.
	for range 2 {
		out, err := d2.UnprepareResourceClaims(t.Context(), []kubeletplugin.NamespacedObject{{UID: "u1"}})
		if err != nil || out["u1"] != nil {
			t.Fatalf("unprepare: %v %v", err, out)
		}
	}
	r2.waitNames(t, want[:2])
	d3, _ := newDriver(t, path)
	if n := len(d3.Claims()); n != 0 {
		t.Errorf("%d claims in the checkpoint after unprepare", n)
	}
}

func TestPrepareRefusesWhatIsNotOffered(t *testing.T) {
	d, _ := newDriver(t, filepath.Join(t.TempDir(), "cp.json"))
	if _, err := d.Sync(t.Context(), offerOf(slicesOf(uuidA, 0x06, 0, 2, 40779, true))); err != nil {
		t.Fatal(err)
	}
	if _, err := d.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{claimOn("u1", ledger.DeviceName(uuidA, 0))}); err != nil {
		t.Fatal(err)
	}
	other := claimOn("u3", ledger.DeviceName(uuidA, 0))
	other.Status.Allocation.Devices.Results[0].Pool = "node-2"
	unalloc := claimOn("u4", ledger.DeviceName(uuidA, 1))
	unalloc.Status.Allocation = nil
	res, err := d.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{
		claimOn("u2", ledger.DeviceName(uuidA, 0)), other, unalloc, claimOn("u5", ledger.DeviceName(uuidA, 7)),
	})
	if err != nil {
		t.Fatal(err)
	}
	for uid, want := range map[types.UID]string{"u2": "held by claim u1", "u3": `pool "node-2"`, "u4": "not allocated", "u5": "not offered"} {
		if e := res[uid].Err; e == nil || !containsStr(e.Error(), want) {
			t.Errorf("claim %s: %v, want an error saying %q", uid, e, want)
		}
	}
	if n := len(d.Claims()); n != 1 {
		t.Errorf("%d claims prepared, want 1", n)
	}
}

func TestAFailedPublicationIsReported(t *testing.T) {
	d, r := newDriver(t, filepath.Join(t.TempDir(), "cp.json"))
	r.err = errors.New("API server away")
	if _, err := d.Sync(t.Context(), offerOf(slicesOf(uuidA, 0x06, 0, 2, 40779, true))); err == nil {
		t.Fatal("a failed publication was not reported to the agent")
	}
}

func containsStr(s, sub string) bool { return strings.Contains(s, sub) }

func writeRaw(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }

// watchHealth runs the kubelet's health stream until the test ends.
func watchHealth(t *testing.T, d *Driver) <-chan kubeletplugin.DeviceHealthReport {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error, 1)
	go func() { done <- d.WatchHealthStatus(ctx, reports) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchHealthStatus: %v", err)
		}
	})
	return reports
}

// waitHealth reads health reports until one says device has status, and
// answers it by device name; a minute without one fails the test.
func waitHealth(t *testing.T, reports <-chan kubeletplugin.DeviceHealthReport, device string, status kubeletplugin.HealthStatus) map[string]kubeletplugin.HealthStatus {
	t.Helper()
	timeout := time.After(time.Minute)
	var last map[string]kubeletplugin.HealthStatus
	for {
		select {
		case r := <-reports:
			last = map[string]kubeletplugin.HealthStatus{}
			for _, h := range r.Devices {
				if h.PoolName != "node-1" || h.HealthCheckTimeout <= 0 || h.Message == "" {
					t.Errorf("health of %s: %+v", h.DeviceName, h)
				}
				last[h.DeviceName] = h.Health
			}
			if last[device] == status {
				return last
			}
		case <-timeout:
			t.Fatalf("no health report with %s %s; the last: %v", device, status, last)
		}
	}
}
