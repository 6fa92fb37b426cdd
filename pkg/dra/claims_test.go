package dra

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/entries"
	"yunion.io/x/mps-daemon/pkg/identity"
	"yunion.io/x/mps-daemon/pkg/ledger"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// node is a host's directories for claims: CDI specs, identity files, a
// pipe directory short enough for MPS sockets.
type node struct {
	spec entries.Spec
	pipe string
}

func newNode(t *testing.T) node {
	t.Helper()
	dir, err := os.MkdirTemp("", "dra")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return node{
		spec: entries.Spec{CDI: cdi.Options{Dir: filepath.Join(dir, "cdi"), DevRoot: filepath.Join(dir, "dev")}, Identity: identity.Store{Dir: filepath.Join(dir, "identity")}},
		pipe: filepath.Join(dir, "pipe", uuidA),
	}
}

// gpus are the agent's GPUs: A (80 GiB, minor 0) shared by at most
// maxClaims claims, B (minor 1) in slices.
func (n node) gpus(maxClaims int, healthy bool) []backend.GPU {
	a := slicesOf(uuidA, 0x06, 0, 1, 81559, healthy)
	a.Sharing, a.VirtualNumber = config.SharingClaims, maxClaims
	a.Devices[0].PipeDir = n.pipe
	b := slicesOf(uuidB, 0x07, 1, 2, 40779, true)
	for i := range b.Devices {
		b.Devices[i].PipeDir = filepath.Join(filepath.Dir(n.pipe), uuidB)
	}
	return []backend.GPU{a, b}
}

// offer is the agent's offer of n.gpus.
func (n node) offer(maxClaims int, healthy bool) backend.Offer {
	return backend.Offer{GPUs: n.gpus(maxClaims, healthy), ClaimSpec: n.spec}
}

// reconcile is what one of the agent's reconciles does to the driver.
func (n node) reconcile(t *testing.T, d *Driver, maxClaims int, healthy bool) {
	t.Helper()
	if _, err := d.Sync(t.Context(), n.offer(maxClaims, healthy)); err != nil {
		t.Fatal(err)
	}
}

// sharedClaim is a claim allocated memGi GiB (and threads %) of GPU A's
// claims device, as the allocator records a consumable-capacity share.
func sharedClaim(uid string, memGi, threads int64) *resourceapi.ResourceClaim {
	c := claimOn(uid, ledger.ClaimsDeviceName(uuidA))
	r := &c.Status.Allocation.Devices.Results[0]
	r.ShareID = ptrUID(types.UID("5a1e0000-0000-4000-8000-" + strings.Repeat("0", 12-len(uid)) + uid))
	r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
		CapMemory:        *resource.NewQuantity(memGi<<30, resource.BinarySI),
		CapThreads:       *resource.NewQuantity(threads, resource.DecimalSI),
		CapVirtualNumber: *resource.NewQuantity(1, resource.DecimalSI),
	}
	c.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: "mps.yunion.io", Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			CapMemory: *resource.NewQuantity(memGi<<30, resource.BinarySI)}}}}}
	return c
}

func ptrUID(u types.UID) *types.UID { return &u }

// claimSpec is the claims' CDI spec on disk, by device name.
func (n node) claimSpec(t *testing.T) map[string]specs.Device {
	t.Helper()
	o := n.spec.CDI
	o.Kind = claim.DefaultKind
	path, err := cdi.SpecPath(o)
	if err != nil {
		t.Fatal(err)
	}
	s, err := cdiapi.ReadSpec(path, 0)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("the CDI library refuses the claims' spec: %v", err)
	}
	out := map[string]specs.Device{}
	for _, dv := range s.Devices {
		out[dv.Name] = dv
	}
	return out
}

func envOf(dv specs.Device, name string) string {
	for _, e := range dv.ContainerEdits.Env {
		if v, ok := strings.CutPrefix(e, name+"="); ok {
			return v
		}
	}
	return ""
}

func prepareOK(t *testing.T, d *Driver, c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	t.Helper()
	res, err := d.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{c})
	if err != nil || res[c.UID].Err != nil {
		t.Fatalf("prepare %s: %v %v", c.UID, err, res[c.UID].Err)
	}
	return res[c.UID]
}

// A GPU shared by claims is published as one device that claims consume:
// several allocations, memory in whole MiB up to the GPU's, a thread share
// of none by default, one of its claims each; its neighbour in slices as
// ever.
func TestAClaimsGPUIsOneDeviceClaimsConsume(t *testing.T) {
	n := newNode(t)
	d, r := newDriver(t, filepath.Join(t.TempDir(), "cp.json"))
	n.reconcile(t, d, 4, true)
	want := []string{ledger.DeviceName(uuidB, 0), ledger.DeviceName(uuidB, 1), ledger.ClaimsDeviceName(uuidA)}
	if got := r.names(t); !slices.Equal(got, want) {
		t.Fatalf("published %v, want %v", got, want)
	}
	dev := r.device(t, ledger.ClaimsDeviceName(uuidA))
	if dev.AllowMultipleAllocations == nil || !*dev.AllowMultipleAllocations || !*dev.Attributes[AttrSized].BoolValue || *dev.Attributes[AttrSharing].StringValue != "claims" || dev.Attributes[AttrIndex].IntValue != nil {
		t.Errorf("claims device %+v", dev)
	}
	if b1 := r.device(t, ledger.DeviceName(uuidB, 1)); *b1.Attributes[AttrIndex].IntValue != 1 || *b1.Attributes[AttrSized].BoolValue || *b1.Attributes[AttrSharing].StringValue != "slices" || b1.AllowMultipleAllocations != nil {
		t.Errorf("a fixed slice is marked a claims device")
	}
	mem := dev.Capacity[CapMemory]
	if mem.Value.Value() != 81559<<20 || mem.RequestPolicy.Default.Value() != 81559<<20 ||
		mem.RequestPolicy.ValidRange.Min.Value() != 1<<20 || mem.RequestPolicy.ValidRange.Step.Value() != 1<<20 || mem.RequestPolicy.ValidRange.Max.Value() != 81559<<20 {
		t.Errorf("memory %+v", mem)
	}
	th := dev.Capacity[CapThreads]
	if th.Value.Value() != 100 || th.RequestPolicy.Default.Value() != 0 || th.RequestPolicy.ValidRange.Max.Value() != 100 {
		t.Errorf("threads %+v", th)
	}
	cl := dev.Capacity[CapVirtualNumber]
	if cl.Value.Value() != 4 || cl.RequestPolicy.Default.Value() != 1 || len(cl.RequestPolicy.ValidValues) != 1 {
		t.Errorf("claims %+v", cl)
	}
}

// Each claim prepared on the claims device gets its own device: the lowest
// free index from claim.IndexBase, its own CDI entry (its name and its
// share ID's) with the claim's caps and its own identity file, written
// before the answer; the accounting is handed its device. Unprepared, its
// entry goes and its index is free again. A restart rebuilds the spec from
// the checkpoint.
func TestSharesGetDevicesOfTheirOwn(t *testing.T) {
	n := newNode(t)
	path := filepath.Join(t.TempDir(), "cp.json")
	d, _ := newDriver(t, path)
	n.reconcile(t, d, 4, true)
	sizes := map[string]int64{"c1": 40, "c2": 20, "c3": 20}
	for i, uid := range []string{"c1", "c2", "c3"} {
		threads := int64(0)
		if uid == "c3" {
			threads = 30
		}
		res := prepareOK(t, d, sharedClaim(uid, sizes[uid], threads))
		name := string(vdev.NameOf(uuidA, claim.IndexBase+i))
		if got := res.Devices[0]; !slices.Equal(got.CDIDeviceIDs, []string{claim.DefaultKind + "=" + name}) || got.DeviceName != ledger.ClaimsDeviceName(uuidA) || got.ShareID == nil {
			t.Errorf("%s answered %+v, want CDI name %s", uid, got, name)
		}
	}
	spec := n.claimSpec(t)
	for i, uid := range []string{"c1", "c2", "c3"} {
		name := string(vdev.NameOf(uuidA, claim.IndexBase+i))
		dv, ok := spec[name]
		if !ok {
			t.Fatalf("no entry %s in the claims' spec: %v", name, slices.Collect(mapsKeys(spec)))
		}
		wantThreads := map[string]string{"c3": "30"}[uid]
		if wantThreads == "" {
			wantThreads = "100"
		}
		if envOf(dv, cdi.EnvMemoryLimit) != "0="+itoa(sizes[uid]<<10)+"M" || envOf(dv, cdi.EnvThreadPercentage) != wantThreads || envOf(dv, vdev.EnvVar) != name {
			t.Errorf("entry %s: env %v", name, dv.ContainerEdits.Env)
		}
		idFile := ""
		for _, m := range dv.ContainerEdits.Mounts {
			if m.ContainerPath == identity.ContainerPath(uuidA) {
				idFile = m.HostPath
			}
		}
		if b, err := os.ReadFile(idFile); err != nil || string(b) != name+"\n" {
			t.Errorf("entry %s's identity file %q holds %q (%v)", name, idFile, b, err)
		}
		share := sharedClaim(uid, 0, 0).Status.Allocation.Devices.Results[0].ShareID
		if twin, ok := spec[string(*share)]; !ok || !reflect.DeepEqual(twin.ContainerEdits, dv.ContainerEdits) {
			t.Errorf("no entry named by %s's share ID %s with the same edits", uid, *share)
		}
	}
	answer, err := d.Sync(t.Context(), n.offer(4, true))
	if err != nil {
		t.Fatal(err)
	}
	devs := answer.ClaimDevices
	if len(devs) != 3 || devs[0].Device.MemoryLimit != 40<<10 || devs[1].Device.MemoryLimit != 20<<10 || devs[2].Device.ThreadPercentage != 30 ||
		devs[0].Device.Name() != vdev.NameOf(uuidA, claim.IndexBase) || devs[0].Claim != "default/c-c1" || devs[0].UID != "c1" {
		t.Errorf("devices for the accounting: %+v", devs)
	}
	// Unprepare the second: its entry goes; the next claim takes its index.
	if _, err := d.UnprepareResourceClaims(t.Context(), []kubeletplugin.NamespacedObject{{UID: "c2"}}); err != nil {
		t.Fatal(err)
	}
	if _, still := n.claimSpec(t)[string(vdev.NameOf(uuidA, claim.IndexBase+1))]; still || len(d.ledger.ClaimDevices()) != 2 {
		t.Errorf("c2's entry or device outlives its unprepare")
	}
	res := prepareOK(t, d, sharedClaim("c4", 20, 0))
	if got := res.Devices[0].CDIDeviceIDs[0]; got != claim.DefaultKind+"="+string(vdev.NameOf(uuidA, claim.IndexBase+1)) {
		t.Errorf("c4 got %s, want the freed index %d", got, claim.IndexBase+1)
	}
	// A restart: the spec comes back from the checkpoint, the same bytes.
	o := n.spec.CDI
	o.Kind = claim.DefaultKind
	specPath, _ := cdi.SpecPath(o)
	before, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(specPath); err != nil {
		t.Fatal(err)
	}
	d2, _ := newDriver(t, path)
	n.reconcile(t, d2, 4, true)
	if after, err := os.ReadFile(specPath); err != nil || string(after) != string(before) {
		t.Errorf("after a restart the claims' spec is\n%s\nbefore it was\n%s", after, before)
	}
	if again := prepareOK(t, d2, sharedClaim("c4", 20, 0)); !reflect.DeepEqual(again.Devices, res.Devices) {
		t.Errorf("prepare again after a restart: %+v, want %+v", again.Devices, res.Devices)
	}
	// Every claim unprepared: the spec file goes (CDI has no empty spec).
	if _, err := d2.UnprepareResourceClaims(t.Context(), []kubeletplugin.NamespacedObject{{UID: "c1"}, {UID: "c3"}, {UID: "c4"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(specPath); !os.IsNotExist(err) {
		t.Errorf("the claims' spec outlives every claim: %v", err)
	}
}

// A claim's entry is what pkg/cdi makes of a virtual device with the
// claim's caps: the same code path as a fixed slice's, so whatever the
// host's spec gives a slice's container a claim's gets too.
func TestAShareEntryIsAVirtualDevicesEntry(t *testing.T) {
	n := newNode(t)
	d, _ := newDriver(t, filepath.Join(t.TempDir(), "cp.json"))
	n.reconcile(t, d, 4, true)
	prepareOK(t, d, sharedClaim("c1", 40, 25))
	name := vdev.NameOf(uuidA, claim.IndexBase)
	got := n.claimSpec(t)[string(name)]

	base := n.gpus(4, true)[0].Devices[0]
	want := base
	want.Index, want.MemoryLimit, want.ThreadPercentage = claim.IndexBase, 40<<10, 25
	p, err := n.spec.Identity.Path(name)
	if err != nil {
		t.Fatal(err)
	}
	want.IdentityFile = p
	s, err := cdi.Build(n.spec.CDI, []cdi.Device{want})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.ContainerEdits, s.Devices[0].ContainerEdits) {
		t.Errorf("the claim's edits\n%+v\nare not a virtual device's\n%+v", got.ContainerEdits, s.Devices[0].ContainerEdits)
	}
}

// What cannot be a share is refused, each claim with its reason, and
// nothing of it is kept.
func TestBadSharesAreRefused(t *testing.T) {
	n := newNode(t)
	d, _ := newDriver(t, filepath.Join(t.TempDir(), "cp.json"))
	n.reconcile(t, d, 2, true)
	zero := sharedClaim("z0", 20, 0)
	zero.Spec.Devices.Requests[0].Exactly.Capacity.Requests[CapMemory] = resource.MustParse("0")
	negative := sharedClaim("n1", 20, 0)
	negative.Spec.Devices.Requests[0].Exactly.Capacity.Requests["mps.yunion.io/memory"] = resource.MustParse("-20Gi")
	noShare := sharedClaim("s0", 20, 0)
	noShare.Status.Allocation.Devices.Results[0].ShareID = nil
	tooBig := sharedClaim("b0", 90, 0)
	twice := sharedClaim("t2", 10, 0)
	twice.Status.Allocation.Devices.Results = append(twice.Status.Allocation.Devices.Results, twice.Status.Allocation.Devices.Results[0])
	res, err := d.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{zero, negative, noShare, tooBig, twice})
	if err != nil {
		t.Fatal(err)
	}
	for uid, want := range map[types.UID]string{
		"z0": "asks for 0 memory: want more than 0", "n1": "asks for -20Gi memory: want more than 0",
		"s0": "without a share ID", "b0": "offers 81559 MiB at most", "t2": "two shares of GPU",
	} {
		if e := res[uid].Err; e == nil || !strings.Contains(e.Error(), want) {
			t.Errorf("claim %s: %v, want an error saying %q", uid, e, want)
		}
	}
	if len(d.Claims()) != 0 || len(n.claimSpec(t)) != 0 || len(d.ledger.ClaimDevices()) != 0 {
		t.Errorf("refused claims left something behind: %v", d.Claims())
	}
	// Two claims fill a GPU that takes two; the third finds no room.
	prepareOK(t, d, sharedClaim("c1", 10, 0))
	prepareOK(t, d, sharedClaim("c2", 10, 0))
	res, err = d.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{sharedClaim("c3", 10, 0)})
	if err != nil || res["c3"].Err == nil || !strings.Contains(res["c3"].Err.Error(), "holds 2 claims, the most its device takes") {
		t.Errorf("a third claim on a GPU of two: %v %v", err, res["c3"].Err)
	}
	// Unhealthy: no share is prepared; the device stays, tainted.
	n.reconcile(t, d, 2, false)
	if _, err := d.UnprepareResourceClaims(t.Context(), []kubeletplugin.NamespacedObject{{UID: "c1"}}); err != nil {
		t.Fatal(err)
	}
	res, err = d.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{sharedClaim("c5", 10, 0)})
	if err != nil || res["c5"].Err == nil || !strings.Contains(res["c5"].Err.Error(), "is not serving") {
		t.Errorf("a share on an unhealthy GPU: %v %v", err, res["c5"].Err)
	}
}

func mapsKeys(m map[string]specs.Device) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func itoa(v int64) string { return resource.NewQuantity(v, resource.DecimalSI).String() }
