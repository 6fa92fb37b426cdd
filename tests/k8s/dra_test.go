package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"sigs.k8s.io/yaml"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	tspodman "yunion.io/x/mps-daemon/internal/testsupport/podman"
)

const (
	driverName = "mps.yunion.io"
	nodeName   = "node-1"
	cdiKind    = "yunion.io/mps-gpu"
)

// devicesYAML shares the simulated 8 x H100 host's GPU 0 (bus 18) in n0
// (not at all when 0) and GPU 1 (bus 2a) in n1.
func devicesYAML(n0, n1 int) string {
	y := "devices:\n"
	for _, g := range []struct {
		bus string
		n   int
	}{{"18", n0}, {"2A", n1}} {
		if g.n > 0 {
			y += fmt.Sprintf("- path: \"00000000:%s:00.0\"\n  type: NVIDIA_MPS\n  virtual_number: %d\n", g.bus, g.n)
		}
	}
	return y
}

// TestClaimPreparedThroughResizeAndKill is the DRA driver's whole life on
// one node against a real kube-apiserver: slices published from the plan,
// a claim allocated by the scheduler's allocator with a CEL selector on
// memory, registration and prepare as the kubelet does them, a container
// started by Podman with the answered CDI name; a resize that changes the
// free devices and not the prepared one; kill -9 and a restart that keeps
// the claim and publishes the same devices; unprepare, twice.
func TestClaimPreparedThroughResizeAndKill(t *testing.T) {
	busybox := tspodman.Require(t)
	api := startAPIServer(t)
	ctx := t.Context()
	if _, err := api.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the node: %v", err)
	}
	createClasses(t, api)

	h := newHost(t, deployRBAC(t, api))
	h.writeDevices(t, 2, 4)
	d := h.start(t)
	pool := waitPool(t, api, "six devices published", func(p poolView) bool { return len(p) == 6 }, d)
	byGPU := pool.byGPU()
	if len(byGPU) != 2 {
		t.Fatalf("devices of %d GPUs published, want 2: %v", len(byGPU), pool)
	}
	for uuid, devs := range byGPU {
		want := map[int]int64{2: 40960 << 20, 4: 20480 << 20}[len(devs)]
		for _, dv := range devs {
			if m := memory(dv); m != want || attr(dv, "sharing") != "slices" || attr(dv, "driverVersion") != "580.159.04" || attr(dv, "productName") != "NVIDIA H100 80GB HBM3" {
				t.Errorf("GPU %s device %s: memory %d (want %d), attributes %v", uuid, dv.Name, m, want, dv.Attributes)
			}
		}
	}

	// The scheduler's part: the claim of the example template, allocated by
	// the structured allocator against the published slices.
	tmpl := manifest[resourceapi.ResourceClaimTemplate](t, "claim-example.yaml", "ResourceClaimTemplate")
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cuda-app-gpu"}, Spec: tmpl.Spec.Spec}
	claim, err := api.client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the claim: %v", err)
	}
	claim = allocate(t, api, claim)
	got := claim.Status.Allocation.Devices.Results[0]
	held := pool[got.Device]
	if memory(held) < 30<<30 {
		t.Fatalf("allocated %s with %d bytes: the selector asks for 30Gi", got.Device, memory(held))
	}
	wantCDI := fmt.Sprintf("%s=%s::%d", cdiKind, attr(held, "uuid"), *held.Attributes["index"].IntValue)

	// The kubelet's part: registration, then prepare.
	k := register(t, h.registrarDir, driverName)
	cdiNames, perr := k.prepare(claim)
	if perr != "" || !slices.Equal(cdiNames, []string{wantCDI}) {
		t.Fatalf("NodePrepareResources: CDI names %v, error %q; want [%s]", cdiNames, perr, wantCDI)
	}

	// The runtime's part: Podman starts a container with that CDI name.
	pm := tspodman.New(t, h.cdiDir)
	out := pm.Run("run", "--rm", "--network", "none", "--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "--device", cdiNames[0], pm.Image(busybox), "sh", "-c",
		`echo "DEV $YUNION_MPS_VIRTUAL_DEVICE"; echo "ID $(cat /run/yunion-mps/devices/$NVIDIA_VISIBLE_DEVICES)"; echo "MEM $CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"`)
	vdev := strings.TrimPrefix(wantCDI, cdiKind+"=")
	for _, want := range []string{"DEV " + vdev, "ID " + vdev, "MEM 0=40960M"} {
		if !strings.Contains(out, want) {
			t.Errorf("the container does not see %q:\n%s", want, out)
		}
	}

	// A resize while the claim is prepared: GPU 1 goes from 4 devices to 2
	// and the prepared device's GPU 0 leaves the device YAML: its free
	// device is withdrawn; the prepared one, its slice entry and its CDI
	// entry stay as they were.
	entryBefore := h.cdiEntry(t, vdev)
	heldGPU := attr(held, "uuid")
	h.writeDevices(t, 0, 2)
	pool = waitPool(t, api, "GPU 1 resized to 2 devices, GPU 0 left with the held device", func(p poolView) bool { return len(p) == 3 }, d)
	for uuid, devs := range pool.byGPU() {
		if uuid == heldGPU {
			if len(devs) != 1 || devs[0].Name != got.Device {
				t.Errorf("GPU 0 publishes %v after leaving the YAML, want only the held %s", devs, got.Device)
			}
			continue
		}
		for _, dv := range devs {
			if memory(dv) != 40960<<20 {
				t.Errorf("after the resize GPU %s device %s has %d bytes, want 40Gi", uuid, dv.Name, memory(dv))
			}
		}
	}
	if !reflect.DeepEqual(pool[got.Device], held) {
		t.Errorf("the prepared device changed in the slice:\nbefore %+v\nafter  %+v", held, pool[got.Device])
	}
	if after := h.cdiEntry(t, vdev); !reflect.DeepEqual(after, entryBefore) {
		t.Errorf("the prepared device's CDI entry changed:\nbefore %+v\nafter  %+v", entryBefore, after)
	}

	// kill -9; the slices are deleted meanwhile (as when a node's slices
	// are cleaned up), so what comes back is what the restart publishes.
	d.Kill(t)
	if err := api.client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.driver=" + driverName}); err != nil {
		t.Fatalf("deleting the slices: %v", err)
	}
	waitPool(t, api, "no slices", func(p poolView) bool { return len(p) == 0 }, nil)
	d = h.start(t)
	after := waitPool(t, api, "the same devices published after the restart", func(p poolView) bool { return len(p) == 3 }, d)
	if !reflect.DeepEqual(after, pool) {
		t.Errorf("after the restart the pool is\n%v\nbefore the kill it was\n%v", after, pool)
	}
	k = register(t, h.registrarDir, driverName)
	if again, perr := k.prepare(claim); perr != "" || !slices.Equal(again, cdiNames) {
		t.Errorf("prepare after the restart: %v %q, want %v", again, perr, cdiNames)
	}
	// The checkpoint holds the claim: a second claim on the same device is
	// refused, as the last line of defence against a double allocation.
	thief := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "thief"}, Spec: claim.Spec}
	thief, err = api.client.ResourceV1().ResourceClaims("default").Create(ctx, thief, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	thief.Status.Allocation = claim.Status.Allocation.DeepCopy()
	if thief, err = api.client.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, thief, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, perr := k.prepare(thief); !strings.Contains(perr, "held by claim "+string(claim.UID)) {
		t.Errorf("a second claim on the prepared device: error %q, want it refused as held", perr)
	}

	// Unprepare, twice (the kubelet may repeat it): the device, out of the
	// device YAML since the resize, leaves the pool and is no one's.
	k.unprepare(claim)
	k.unprepare(claim)
	waitPool(t, api, "the unprepared device withdrawn", func(p poolView) bool {
		_, still := p[got.Device]
		return len(p) == 2 && !still
	}, d)
	if _, perr := k.prepare(thief); !strings.Contains(perr, "not offered on this node") {
		t.Errorf("a claim on the withdrawn device: error %q, want it refused as not offered", perr)
	}
}

// manifest reads the (first) object of this kind from
// deploy/kubernetes/name.
func manifest[T any](t *testing.T, name, kind string) *T {
	t.Helper()
	return manifests[T](t, name, kind)[0]
}

// manifests reads every object of this kind from deploy/kubernetes/name.
func manifests[T any](t *testing.T, name, kind string) []*T {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []*T
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if meta.Kind == kind {
			var o T
			if err := yaml.UnmarshalStrict([]byte(doc), &o); err != nil {
				t.Fatalf("%s: %s: %v", name, kind, err)
			}
			out = append(out, &o)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s holds no %s", name, kind)
	}
	return out
}

// createClasses creates deploy/kubernetes's DeviceClasses.
func createClasses(t *testing.T, api *apiServer) {
	t.Helper()
	for _, class := range manifests[resourceapi.DeviceClass](t, "deviceclass.yaml", "DeviceClass") {
		if _, err := api.client.ResourceV1().DeviceClasses().Create(t.Context(), class, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating the DeviceClass %s of deploy/kubernetes: %v", class.Name, err)
		}
	}
}

// allocate is the scheduler's part for one claim on the node: the
// structured allocator against the published slices and classes, the
// result written to the claim's status with the pod that reserves it.
func allocate(t *testing.T, api *apiServer, claim *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	t.Helper()
	got, ok := tryAllocate(t, api, claim)
	if !ok {
		t.Fatalf("claim %s cannot be allocated", claim.Name)
	}
	return got
}

// tryAllocate is allocate, or false when the allocator finds no devices
// for the claim (the scheduler leaves its pod pending: "cannot allocate
// all claims"). The devices allocated already are what the API server's
// claims hold, gathered as the scheduler gathers them, consumed capacity
// of shared devices included; the allocator runs with consumable capacity
// and device taints, as the scheduler of the pinned release does.
func tryAllocate(t *testing.T, api *apiServer, claim *resourceapi.ResourceClaim) (*resourceapi.ResourceClaim, bool) {
	t.Helper()
	ctx := t.Context()
	sl, err := api.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node, err := api.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ptrs []*resourceapi.ResourceSlice
	for i := range sl.Items {
		ptrs = append(ptrs, &sl.Items[i])
	}
	alloc, err := structured.NewAllocator(ctx, structured.Features{ConsumableCapacity: true, DeviceTaints: true}, allocatedState(t, api),
		classLister{api}, ptrs, cel.NewCache(10, cel.Features{}))
	if err != nil {
		t.Fatalf("allocator: %v", err)
	}
	results, err := alloc.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		t.Fatalf("allocating %s: %v", claim.Name, err)
	}
	if len(results) == 0 {
		return nil, false
	}
	claim = claim.DeepCopy()
	claim.Status.Allocation = &results[0]
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod-" + claim.Name, UID: types.UID("pod-uid-" + claim.Name)}}
	claim, err = api.client.ResourceV1().ResourceClaims(claim.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("writing the allocation: %v", err)
	}
	return claim, true
}

// allocatedState is what the API server's claims hold allocated: whole
// devices, and shares of devices that take several with the capacity they
// consume (the scheduler's GatherAllocatedState).
func allocatedState(t *testing.T, api *apiServer) structured.AllocatedState {
	t.Helper()
	st := structured.AllocatedState{
		AllocatedDevices: sets.New[structured.DeviceID](), AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity: structured.NewConsumedCapacityCollection(),
	}
	list, err := api.client.ResourceV1().ResourceClaims("").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list.Items {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if r.ShareID == nil {
				st.AllocatedDevices.Insert(id)
				continue
			}
			st.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
			if r.ConsumedCapacity != nil {
				st.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
			}
		}
	}
	return st
}

// classLister reads DeviceClasses from the API server.
type classLister struct{ api *apiServer }

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	list, err := l.api.client.ResourceV1().DeviceClasses().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []*resourceapi.DeviceClass
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	return l.api.client.ResourceV1().DeviceClasses().Get(context.Background(), name, metav1.GetOptions{})
}

// poolView is the driver's published devices by name.
type poolView map[string]resourceapi.Device

func (p poolView) String() string {
	b, _ := json.MarshalIndent(p, "", " ")
	return string(b)
}

func (p poolView) byGPU() map[string][]resourceapi.Device {
	out := map[string][]resourceapi.Device{}
	for _, d := range p {
		out[attr(d, "uuid")] = append(out[attr(d, "uuid")], d)
	}
	return out
}

func attr(d resourceapi.Device, name string) string {
	if v, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok && v.StringValue != nil {
		return *v.StringValue
	}
	return ""
}

func memory(d resourceapi.Device) int64 {
	c := d.Capacity["memory"]
	return c.Value.Value()
}

// waitPool waits until the node's pool of the driver satisfies cond. The
// daemon's exit fails the wait at once.
func waitPool(t *testing.T, api *apiServer, what string, cond func(poolView) bool, d *daemon) poolView {
	t.Helper()
	var last poolView
	eventually(t, what, func() (bool, string) {
		if d != nil && d.Exited() {
			t.Fatalf("mps-daemon exited:\n%s", d.Output())
		}
		list, err := api.client.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{FieldSelector: "spec.driver=" + driverName})
		if err != nil {
			return false, err.Error()
		}
		last = poolView{}
		for _, s := range list.Items {
			if s.Spec.NodeName == nil || *s.Spec.NodeName != nodeName || s.Spec.Pool.Name != nodeName {
				t.Fatalf("slice %s is not the node's: %+v", s.Name, s.Spec)
			}
			for _, dv := range s.Spec.Devices {
				last[dv.Name] = dv
			}
		}
		return cond(last), last.String()
	})
	return last
}

// cdiEntry is the device's entry in the daemon's CDI spec.
func (h *host) cdiEntry(t *testing.T, name string) cdispec.Device {
	t.Helper()
	d, ok := h.specEntries(t, "yunion.io-mps-gpu.yaml")[name]
	if !ok {
		t.Fatalf("no %s in the CDI spec", name)
	}
	return d
}

// specEntries are the entries of one of the daemon's CDI specs, by name;
// none when the file is not there.
func (h *host) specEntries(t *testing.T, file string) map[string]cdispec.Device {
	t.Helper()
	out := map[string]cdispec.Device{}
	b, err := os.ReadFile(filepath.Join(h.cdiDir, file))
	if os.IsNotExist(err) {
		return out
	}
	if err != nil {
		t.Fatal(err)
	}
	var s cdispec.Spec
	if err := yaml.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	for _, d := range s.Devices {
		out[d.Name] = d
	}
	return out
}
