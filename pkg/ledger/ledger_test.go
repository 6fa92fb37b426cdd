package ledger

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/entries"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/identity"
	"yunion.io/x/mps-daemon/pkg/pci"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// The ledger alone: no Kubernetes type, no client. Claims are the
// allocations pkg/dra would read from ResourceClaims.

const (
	uuidA = "GPU-81df1fb7-5946-da34-7f70-c730b0456642" // shared by claims
	uuidB = "GPU-0c7b1e2a-1111-2222-3333-444455556666" // fixed slices
)

// node is a host's directories: CDI specs, identity files, a pipe
// directory short enough for MPS sockets, the checkpoint.
type node struct {
	spec       entries.Spec
	pipe, path string
}

func newNode(t *testing.T) node {
	t.Helper()
	dir, err := os.MkdirTemp("", "ldg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return node{
		spec: entries.Spec{CDI: cdi.Options{Dir: filepath.Join(dir, "cdi"), DevRoot: filepath.Join(dir, "dev")}, Identity: identity.Store{Dir: filepath.Join(dir, "identity")}},
		pipe: filepath.Join(dir, "pipe"), path: filepath.Join(dir, "plugin", "cp.json"),
	}
}

func (n node) open(t *testing.T) *Ledger {
	t.Helper()
	l, err := Open(Options{Pool: "node-1", Driver: "mps.yunion.io", CheckpointPath: n.path})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// offer is a reconcile's: GPU A whole, shared by at most claims claims;
// GPU B in two slices of 40779 MiB.
func (n node) offer(claims int) backend.Offer {
	return backend.Offer{
		GPUs: []backend.GPU{
			{Sharing: config.SharingClaims, VirtualNumber: claims, Healthy: true, Devices: n.devices(uuidA, 0x06, 0, 1, 81559)},
			{VirtualNumber: 2, Healthy: true, Devices: n.devices(uuidB, 0x07, 1, 2, 40779)},
		},
		ClaimSpec: n.spec,
	}
}

// devices are the GPU's n devices of memMiB each, as the agent offers
// them.
func (n node) devices(uuid string, dev uint8, minor, count int, memMiB units.MiB) []cdi.Device {
	g := gpu.Info{UUID: gpu.UUID(uuid), Minor: minor, Name: "NVIDIA H100 80GB HBM3", PCI: pci.Address{Device: dev}}
	var out []cdi.Device
	for i := range count {
		out = append(out, cdi.FromVirtual(vdev.Device{GPU: g, Index: i, MemoryLimit: memMiB, ThreadPercentage: 100 / count}, "", filepath.Join(n.pipe, uuid)))
	}
	return out
}

// fixed is a claim allocated slice i of GPU B.
func fixed(uid string, i int) Allocation {
	return Allocation{UID: uid, Namespace: "default", Name: "c-" + uid, Allocated: true, Reserved: true,
		Results: []Result{{Request: "gpu", Pool: "node-1", Device: DeviceName(uuidB, i)}}}
}

// share is a claim allocated gib GiB of GPU A's claims device.
func share(uid string, gib int) Allocation {
	return Allocation{UID: uid, Namespace: "default", Name: "c-" + uid, Allocated: true, Reserved: true,
		Results: []Result{{Request: "gpu", Pool: "node-1", Device: ClaimsDeviceName(uuidA), ShareID: "5a1e0000-0000-4000-8000-" + strings.Repeat("0", 12-len(uid)) + uid,
			Memory: vdevMiB(gib), MemoryRecorded: true}}}
}

func vdevMiB(gib int) units.MiB { return units.MiB(gib << 10) }

func prepareOK(t *testing.T, l *Ledger, allocs ...Allocation) map[string]PrepareResult {
	t.Helper()
	res, err := l.Prepare(allocs)
	if err != nil {
		t.Fatal(err)
	}
	for uid, r := range res {
		if r.Err != nil {
			t.Fatalf("prepare %s: %v", uid, r.Err)
		}
	}
	return res
}

// The slots of claims' own devices: the lowest free at prepare, a freed
// one taken again; a rebuild gives each the index its CDI entry had, and
// one whose index is taken the lowest free, by the same assignment.
func TestOneSlotAssignmentForPrepareAndRebuild(t *testing.T) {
	n := newNode(t)
	l := n.open(t)
	l.Sync(n.offer(4))
	prepareOK(t, l, share("c1", 40), share("c2", 20), share("c3", 10))
	index := func(l *Ledger, uid string) int { return l.Claims()[uid].Devices[0].Own.Index }
	for uid, want := range map[string]int{"c1": claim.IndexBase, "c2": claim.IndexBase + 1, "c3": claim.IndexBase + 2} {
		if got := index(l, uid); got != want {
			t.Errorf("%s at index %d, want %d", uid, got, want)
		}
	}
	if _, err := l.Unprepare([]string{"c2"}); err != nil {
		t.Fatal(err)
	}
	prepareOK(t, l, share("c4", 5))
	if got := index(l, "c4"); got != claim.IndexBase+1 {
		t.Errorf("c4 at %d, want the freed %d", got, claim.IndexBase+1)
	}
	want := l.Claims()

	// Corrupt: the rebuild lists the claims in another order and finds
	// each index in the claims' spec.
	if err := os.WriteFile(n.path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	l2 := n.open(t)
	l2.Sync(n.offer(4))
	if !l2.RebuildPending() {
		t.Fatal("no rebuild pending after a corrupt checkpoint")
	}
	unreserved := share("c9", 1)
	unreserved.Reserved = false
	if err := l2.Rebuild([]Allocation{share("c4", 5), unreserved, share("c3", 10), share("c1", 40)}, nil); err != nil {
		t.Fatal(err)
	}
	if got := l2.Claims(); !reflect.DeepEqual(got, want) {
		t.Errorf("rebuilt\n%+v\nwant\n%+v", got, want)
	}

	// Without the spec, a taken index: the lowest free slots, in order.
	o := n.spec.CDI
	o.Kind = claim.DefaultKind
	specPath, _ := cdi.SpecPath(o)
	if err := os.Remove(specPath); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	l3 := n.open(t)
	l3.Sync(n.offer(4))
	if err := l3.Rebuild([]Allocation{share("c4", 5), share("c3", 10)}, nil); err != nil {
		t.Fatal(err)
	}
	if index(l3, "c4") != claim.IndexBase || index(l3, "c3") != claim.IndexBase+1 {
		t.Errorf("without the spec: c4 at %d, c3 at %d", index(l3, "c4"), index(l3, "c3"))
	}
}

// A prepared fixed slice is held: the answer names the claim as its
// holder; out of the plan it stays, pending removal, as prepared, and is
// still published until unprepared.
func TestAHeldSliceOutOfThePlanStaysAsPrepared(t *testing.T) {
	n := newNode(t)
	l := n.open(t)
	l.Sync(n.offer(4))
	prepareOK(t, l, fixed("u1", 1))
	o := n.offer(4)
	o.GPUs = o.GPUs[:1] // GPU B gone from the plan
	res := l.Sync(o)
	var held *backend.Holding
	for i := range res.Devices {
		if res.Devices[i].Name == vdev.NameOf(uuidB, 1) {
			held = &res.Devices[i]
		}
	}
	if held == nil || held.Holder != "u1" || !held.PendingRemoval || held.MemoryLimit != 40779 || res.HeldOutOfPlan != 1 {
		t.Fatalf("the held slice in the answer: %+v (held out of the plan %d)", held, res.HeldOutOfPlan)
	}
	names := func() []string {
		var out []string
		for _, d := range l.State().Published {
			out = append(out, d.Name)
		}
		return out
	}
	if got, want := names(), []string{DeviceName(uuidB, 1), ClaimsDeviceName(uuidA)}; !reflect.DeepEqual(got, want) {
		t.Errorf("published %v, want %v", got, want)
	}
	if _, err := l.Unprepare([]string{"u1"}); err != nil {
		t.Fatal(err)
	}
	if got, want := names(), []string{ClaimsDeviceName(uuidA)}; !reflect.DeepEqual(got, want) {
		t.Errorf("after unprepare published %v, want %v", got, want)
	}
}

// A checkpoint that cannot be written prepares nothing: the kubelet asks
// again.
func TestACheckpointThatCannotBeWrittenPreparesNothing(t *testing.T) {
	n := newNode(t)
	l := n.open(t)
	l.Sync(n.offer(4))
	if err := os.WriteFile(filepath.Join(filepath.Dir(n.pipe), "a-file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	l.opts.CheckpointPath = filepath.Join(filepath.Dir(n.pipe), "a-file", "cp.json")
	if _, err := l.Prepare([]Allocation{fixed("u1", 0)}); err == nil {
		t.Fatal("prepared without a checkpoint")
	}
	if n := len(l.Claims()); n != 0 {
		t.Errorf("%d claims kept that the checkpoint does not hold", n)
	}
}

func TestABadCheckpointIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.json")
	if err := saveCheckpoint(path, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(`{"version": 9, "claims": {}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Pool: "n", CheckpointPath: path}); err == nil || !strings.Contains(err.Error(), "version 9") {
		t.Errorf("Open with a checkpoint of another version: %v", err)
	}
}

// A checkpoint that is not a file of the driver's is corrupt, whatever it
// is: reported, moved aside, never waited on (a FIFO) or read whole; a
// rebuild is pending, and stays so through restarts until it is done.
func TestCheckpointsThatAreNotTheDriversAreCorrupt(t *testing.T) {
	for name, mk := range map[string]func(path string) error{
		"empty":         func(p string) error { return os.WriteFile(p, nil, 0o600) },
		"not JSON":      func(p string) error { return os.WriteFile(p, []byte("\x00\x01garbage"), 0o600) },
		"version 0":     func(p string) error { return os.WriteFile(p, []byte(`{"claims":{}}`), 0o600) },
		"FIFO":          func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"symbolic link": func(p string) error { return os.Symlink("/etc/passwd", p) },
		"huge":          func(p string) error { return os.WriteFile(p, make([]byte, maxCheckpointBytes+1), 0o600) },
		"claim under another UID": func(p string) error {
			return os.WriteFile(p, []byte(`{"version":2,"claims":{"a":{"uid":"b","devices":[{"pool":"n","device":{"name":"x","gpuUUID":"G"}}]}}}`), 0o600)
		},
		"two own devices of one index": func(p string) error {
			s := `{"id":"%s","index":1000,"memoryLimitMiB":1,"threadPercentage":1,"cdiName":"x"}`
			dev := `{"pool":"n","device":{"name":"x","gpuUUID":"G","sized":true},"share":` + s + `}`
			return os.WriteFile(p, []byte(`{"version":2,"claims":{"a":{"uid":"a","devices":[`+strings.Replace(dev, "%s", "1", 1)+`]},"b":{"uid":"b","devices":[`+strings.Replace(dev, "%s", "2", 1)+`]}}}`), 0o600)
		},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cp.json")
			if err := mk(path); err != nil {
				t.Fatal(err)
			}
			for restart := range 2 {
				l, err := Open(Options{Pool: "node-1", CheckpointPath: path})
				if err != nil {
					t.Fatalf("start %d: %v", restart, err)
				}
				if l.rebuild == nil {
					t.Errorf("start %d: no rebuild pending", restart)
				}
				if _, err := os.Lstat(path); !os.IsNotExist(err) {
					t.Errorf("start %d: the corrupt checkpoint is still at its path: %v", restart, err)
				}
				if res, err := l.Prepare([]Allocation{fixed("u1", 0)}); err != nil || res["u1"].Err == nil || !strings.Contains(res["u1"].Err.Error(), "being rebuilt") {
					t.Errorf("start %d: prepare before the rebuild: %v %v", restart, err, res["u1"].Err)
				}
			}
			l, _ := Open(Options{Pool: "node-1", CheckpointPath: path})
			l.Sync(backend.Offer{})
			if err := l.Rebuild(nil, nil); err != nil {
				t.Fatal(err)
			}
			if l, err := Open(Options{Pool: "node-1", CheckpointPath: path}); err != nil || l.rebuild != nil {
				t.Errorf("after the rebuild: %v, rebuild %v", err, l.rebuild)
			}
		})
	}
}
