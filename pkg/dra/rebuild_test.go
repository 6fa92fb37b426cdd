package dra

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"yunion.io/x/mps-daemon/pkg/ledger"
)

// A truncated checkpoint is reported, moved aside and rebuilt from the
// API server's claims once a reconcile has said what the node has: every
// claim of this pool reserved for a pod, fixed slices and shares, each
// share at the index its CDI entry had; none is lost. Until then nothing
// is published, prepared or unprepared.
func TestACorruptCheckpointIsRebuiltFromTheAPIServer(t *testing.T) {
	n := newNode(t)
	path := filepath.Join(t.TempDir(), "cp.json")
	d, _ := newDriver(t, path)
	n.reconcile(t, d, 4, true)
	// Prepared in this order, c2 gets index 1000 and c3 1001; listed c3
	// first, a rebuild without the spec would swap them.
	fixed := claimOn("c1", ledger.DeviceName(uuidB, 0))
	c2, c3 := sharedClaim("c2", 40, 0), sharedClaim("c3", 20, 30)
	for _, c := range []*resourceapi.ResourceClaim{fixed, c2, c3} {
		prepareOK(t, d, c)
	}
	want := d.Claims()
	specBefore := n.claimSpec(t)

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	d2, err := New(Options{NodeName: "node-1", CheckpointPath: path})
	if err != nil {
		t.Fatalf("a truncated checkpoint stops the driver: %v", err)
	}
	if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 1 {
		t.Errorf("the corrupt checkpoint is not kept aside: %v", aside)
	}
	if res, err := d2.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{c2}); err != nil || res["c2"].Err == nil || !strings.Contains(res["c2"].Err.Error(), "being rebuilt") {
		t.Errorf("prepare before the rebuild: %v %v", err, res["c2"].Err)
	}
	if _, err := d2.UnprepareResourceClaims(t.Context(), []kubeletplugin.NamespacedObject{{UID: "c2"}}); err == nil {
		t.Error("unprepare before the rebuild answered as done")
	}

	var objs []runtime.Object
	for _, c := range []*resourceapi.ResourceClaim{c3, fixed, c2} {
		c = c.DeepCopy()
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p-" + string(c.UID), UID: types.UID("pod-" + c.UID)}}
		objs = append(objs, c)
	}
	idle := claimOn("c9", ledger.DeviceName(uuidB, 1)) // allocated, no pod: not prepared
	objs = append(objs, idle)
	r := &recorder{}
	t.Cleanup(d2.setPublisher(t.Context(), r, fake.NewClientset(objs...)))
	if len(r.pools) != 0 {
		t.Fatal("published before the rebuild")
	}
	n.reconcile(t, d2, 4, true)
	if got := d2.Claims(); !reflect.DeepEqual(got, want) {
		t.Errorf("rebuilt claims\n%+v\nwant\n%+v", got, want)
	}
	if got := n.claimSpec(t); !reflect.DeepEqual(got, specBefore) {
		t.Errorf("the claims' spec changed through the rebuild")
	}
	if len(r.pools) == 0 {
		t.Error("nothing published after the rebuild")
	}
	d3, err := New(Options{NodeName: "node-1", CheckpointPath: path})
	if err != nil || !reflect.DeepEqual(d3.Claims(), want) {
		t.Errorf("the rebuilt checkpoint reads back as %+v (%v)", d3.Claims(), err)
	}
}

// A published device reads back as it was (what a rebuild finds of a held
// device out of the plan): fixed and a claims device, healthy and tainted.
func TestAPublishedDeviceReadsBack(t *testing.T) {
	fixed := ledger.Device{Name: ledger.DeviceName(uuidA, 3), GPUUUID: uuidA, GPUAddr: "0000:00:06.0", Index: 3, ProductName: "NVIDIA H100 80GB HBM3",
		MemoryLimit: 20389, ThreadPercentage: 25, CDIName: "yunion.io/mps-gpu=" + uuidA + "::3", Healthy: true}
	sick := fixed
	sick.Healthy = false
	claims := ledger.Device{Name: ledger.ClaimsDeviceName(uuidB), GPUUUID: uuidB, GPUAddr: "0000:00:07.0", ProductName: "NVIDIA H100 80GB HBM3",
		MemoryLimit: 81559, ThreadPercentage: 100, Healthy: true, ClaimsDevice: true, VirtualNumber: 4}
	for _, dev := range []ledger.Device{fixed, sick, claims} {
		got, ok := deviceFromSlice(sliceDevice(dev, DefaultDriverName, "580.159.04", !dev.Healthy))
		if !ok || !reflect.DeepEqual(got, dev) {
			t.Errorf("read back\n%+v\nwant\n%+v", got, dev)
		}
	}
}

// Issue 40: a restart while the rebuild waits for the API server used to
// come up with no claims and never rebuild. The rebuild is pending until
// it is done: a marker beside the checkpoint says so through any number of
// restarts, every sync fails meanwhile (the node never reports ready with
// claims it has lost), and once the API server answers the claims come
// back and the marker goes.
func TestAPendingRebuildSurvivesRestarts(t *testing.T) {
	n := newNode(t)
	path := filepath.Join(t.TempDir(), "cp.json")
	d, _ := newDriver(t, path)
	n.reconcile(t, d, 4, true)
	fixed := claimOn("c1", ledger.DeviceName(uuidB, 0))
	share := sharedClaim("c2", 40, 0)
	for _, c := range []*resourceapi.ResourceClaim{fixed, share} {
		prepareOK(t, d, c)
	}
	want := d.Claims()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for _, c := range []*resourceapi.ResourceClaim{fixed, share} {
		c = c.DeepCopy()
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p-" + string(c.UID), UID: types.UID("pod-" + c.UID)}}
		objs = append(objs, c)
	}
	away := func() *fake.Clientset {
		c := fake.NewClientset(objs...)
		c.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
		})
		return c
	}
	for restart := range 3 {
		d, err := New(Options{NodeName: "node-1", CheckpointPath: path})
		if err != nil {
			t.Fatalf("start %d: %v", restart, err)
		}
		if _, err := os.Stat(path + ".rebuild"); err != nil {
			t.Fatalf("start %d: the rebuild marker: %v", restart, err)
		}
		r := &recorder{}
		t.Cleanup(d.setPublisher(t.Context(), r, away()))
		if _, err := d.Sync(t.Context(), n.offer(4, true)); err == nil || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("start %d: a sync with claims still to rebuild: %v, want the API server's error", restart, err)
		}
		if res, err := d.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{share}); err != nil || res["c2"].Err == nil || !strings.Contains(res["c2"].Err.Error(), "being rebuilt") {
			t.Errorf("start %d: prepare before the rebuild: %v %v", restart, err, res["c2"].Err)
		}
		if len(r.pools) != 0 || len(d.Claims()) != 0 {
			t.Errorf("start %d: published %d pools, %d claims, before the rebuild", restart, len(r.pools), len(d.Claims()))
		}
	}
	// The API server back.
	d2, err := New(Options{NodeName: "node-1", CheckpointPath: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d2.setPublisher(t.Context(), &recorder{}, fake.NewClientset(objs...)))
	n.reconcile(t, d2, 4, true)
	if got := d2.Claims(); !reflect.DeepEqual(got, want) {
		t.Errorf("rebuilt claims\n%+v\nwant\n%+v", got, want)
	}
	if _, err := os.Stat(path + ".rebuild"); !os.IsNotExist(err) {
		t.Errorf("the rebuild marker outlives the rebuild: %v", err)
	}
	d3, err := New(Options{NodeName: "node-1", CheckpointPath: path})
	if err != nil || !reflect.DeepEqual(d3.Claims(), want) {
		t.Errorf("the start after the rebuild: %v, claims %+v", err, d3.Claims())
	}
	if _, err := os.Stat(path + ".rebuild"); !os.IsNotExist(err) {
		t.Errorf("the marker after the rebuild: %v", err)
	}
}
