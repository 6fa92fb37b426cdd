package k8s

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	tspodman "yunion.io/x/mps-daemon/internal/testsupport/podman"
	"yunion.io/x/mps-daemon/internal/testsupport/viewkit"
)

const claimKind = "yunion.io/mps-claim"

// sizedYAML shares the simulated host's GPU 0 (bus 18, 80 GiB) by at most
// four claims of any size and GPU 1 (bus 2a) in two fixed slices.
const sizedYAML = `devices:
- path: "00000000:18:00.0"
  type: NVIDIA_MPS
  virtual_number: 4
  sharing: claims
- path: "00000000:2A:00.0"
  type: NVIDIA_MPS
  virtual_number: 2
`

// newNode starts the API server with the node, the DeviceClasses, the
// RBAC and the claim validation of deploy/kubernetes, and the daemon on a
// simulated host with sizedYAML (extra: more host.conf lines).
func newNode(t *testing.T, extra ...string) (*apiServer, *host, *daemon) {
	t.Helper()
	return newNodeVia(t, nil, extra...)
}

// newNodeVia is newNode whose daemon reaches the API server through via
// (nil: directly), which answers the kubeconfig to give it.
func newNodeVia(t *testing.T, via func(kubeconfig string) string, extra ...string) (*apiServer, *host, *daemon) {
	t.Helper()
	api := startAPIServer(t)
	ctx := t.Context()
	if _, err := api.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the node: %v", err)
	}
	createClasses(t, api)
	for _, p := range manifests[admissionv1.ValidatingAdmissionPolicy](t, "claim-validation.yaml", "ValidatingAdmissionPolicy") {
		if _, err := api.client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating %s: %v", p.Name, err)
		}
	}
	for _, b := range manifests[admissionv1.ValidatingAdmissionPolicyBinding](t, "claim-validation.yaml", "ValidatingAdmissionPolicyBinding") {
		if _, err := api.client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating %s: %v", b.Name, err)
		}
	}
	kc := deployRBAC(t, api)
	if via != nil {
		kc = via(kc)
	}
	h := newHost(t, kc, extra...)
	h.writeDevicesText(t, sizedYAML)
	return api, h, h.start(t)
}

// sizedClaim is the sized example's claim asking for memory (and threads,
// when not empty), named name.
func sizedClaim(t *testing.T, name, memory, threads string) *resourceapi.ResourceClaim {
	t.Helper()
	tmpl := manifest[resourceapi.ResourceClaimTemplate](t, "claim-sized-example.yaml", "ResourceClaimTemplate")
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: *tmpl.Spec.Spec.DeepCopy()}
	req := c.Spec.Devices.Requests[0].Exactly.Capacity.Requests
	req["memory"] = resource.MustParse(memory)
	if threads != "" {
		req["threadPercentage"] = resource.MustParse(threads)
	}
	return c
}

func createClaim(t *testing.T, api *apiServer, c *resourceapi.ResourceClaim) (*resourceapi.ResourceClaim, error) {
	t.Helper()
	return api.client.ResourceV1().ResourceClaims(c.Namespace).Create(t.Context(), c, metav1.CreateOptions{})
}

func mustCreate(t *testing.T, api *apiServer, c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	t.Helper()
	c, err := createClaim(t, api, c)
	if err != nil {
		t.Fatalf("creating claim: %v", err)
	}
	return c
}

// The scenario against the real API server and the scheduler's
// allocator: on an 80 GiB GPU shared by claims, claims of 40, 20 and
// 20 GiB all land on its one sized device; a fourth of 30 GiB finds no
// room (its pod stays pending); each prepared claim has its own CDI name,
// under which Podman's container sees its own caps and identity; once one
// of 20 GiB is unprepared and deleted, a claim of 20 GiB allocates and is
// prepared on the index it freed. Each claim's container sees its claim's
// size as its GPU's memory (the view, through the project's stand-ins for
// the CUDA driver and NVML), and a claim unprepared loses its view. Bad sizes are refused by the API server
// (the claim validation of deploy/kubernetes) or the allocator; the fixed
// slices' class never hands out the sized device.
func TestClaimsOfAnySizeShareOneGPU(t *testing.T) {
	busybox := tspodman.Require(t)
	kit := buildViewKit(t)
	api, h, d := newNode(t, "mps_view_library: "+kit.Library)
	pool := waitPool(t, api, "GPU 0's sized device and GPU 1's two slices", func(p poolView) bool { return len(p) == 3 }, d)
	var sized resourceapi.Device
	for _, dv := range pool {
		if dv.AllowMultipleAllocations != nil && *dv.AllowMultipleAllocations {
			sized = dv
		}
	}
	if sized.Name == "" || memory(sized) != 80<<30 {
		t.Fatalf("no sized device of 80 GiB: %v", pool)
	}
	gpu0 := attr(sized, "uuid")

	var claims []*resourceapi.ResourceClaim
	for i, size := range []string{"40Gi", "20Gi", "20Gi"} {
		c := allocate(t, api, mustCreate(t, api, sizedClaim(t, fmt.Sprintf("share-%d", i), size, "")))
		r := c.Status.Allocation.Devices.Results[0]
		consumed := r.ConsumedCapacity["memory"]
		if r.Device != sized.Name || r.ShareID == nil || consumed.Cmp(resource.MustParse(size)) != 0 {
			t.Fatalf("claim of %s allocated %s share %v consuming %s", size, r.Device, r.ShareID, consumed.String())
		}
		claims = append(claims, c)
	}
	fourth := mustCreate(t, api, sizedClaim(t, "share-30", "30Gi", ""))
	if _, ok := tryAllocate(t, api, fourth); ok {
		t.Fatal("a fourth claim of 30 GiB was allocated on a GPU with none left")
	}

	k := register(t, h.registrarDir, driverName)
	pm := tspodman.New(t, h.cdiDir)
	image := pm.Image(busybox)
	glibc := pm.Import("glibc", viewkit.WriteGlibcRootfs)
	// The stand-ins' GPU 0: the whole 80 GiB, all but 1 GiB free.
	gpus := filepath.Join(t.TempDir(), "gpus")
	if err := viewkit.GPUs(gpus, viewkit.GPU{UUID: gpu0, Total: 80 << 30, Free: 79 << 30}); err != nil {
		t.Fatal(err)
	}
	// seesSize checks that claim name's container sees size as its GPU's
	// memory, all of it free, each way.
	seesSize := func(name string, size uint64) {
		t.Helper()
		out := pm.Run(append(append([]string{"run", "--rm", "--network", "none", "--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
			"--device", name}, kit.Mounts(gpus)...), glibc, "sh", "-c", "/opt/t/viewtest dlsym; /opt/t/viewtest procaddr; LD_LIBRARY_PATH=/opt/t python3 /opt/t/ctypes_check.py")...)
		as, errs := viewkit.Parse(out)
		problems, ways := viewkit.Check(as, viewkit.Want{UUID: gpu0, Total: size, Free: size, View: true})
		if len(errs) > 0 || len(problems) > 0 || ways["dlsym"] != 2 || ways["gpa_self@13000"] != 1 || ways["ctypes"] != 2 {
			t.Errorf("%s's container does not see %d MiB: %v %v %v\n%s", name, size>>20, errs, problems, ways, out)
		}
	}
	for i, c := range claims {
		names, perr := k.prepare(c)
		want := fmt.Sprintf("%s=%s::%d", claimKind, gpu0, 1000+i)
		if perr != "" || !slices.Equal(names, []string{want}) {
			t.Fatalf("prepare %s: %v %q, want [%s]", c.Name, names, perr, want)
		}
		out := pm.Run("run", "--rm", "--network", "none", "--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "--device", names[0], image, "sh", "-c",
			`echo "DEV $YUNION_MPS_VIRTUAL_DEVICE"; echo "ID $(cat /run/yunion-mps/devices/$NVIDIA_VISIBLE_DEVICES)"; echo "MEM $CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"; echo "SM $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"`)
		vdev := strings.TrimPrefix(want, claimKind+"=")
		mib := map[int]int{0: 40960, 1: 20480, 2: 20480}[i]
		for _, line := range []string{"DEV " + vdev, "ID " + vdev, fmt.Sprintf("MEM 0=%dM", mib), "SM 100"} {
			if !strings.Contains(out, line) {
				t.Errorf("claim %s's container does not see %q:\n%s", c.Name, line, out)
			}
		}
		seesSize(names[0], uint64(mib)<<20)
	}
	viewOf1001 := filepath.Join(h.dir, "state", "view", gpu0+".1001")
	if _, err := os.Stat(viewOf1001); err != nil {
		t.Errorf("claim share-1's view: %v", err)
	}

	// One of 20 GiB unprepared and deleted: a claim of 20 GiB allocates
	// and gets the index it freed; the one of 30 GiB still finds no room.
	k.unprepare(claims[1])
	if _, still := h.claimEntries(t)[fmt.Sprintf("%s::%d", gpu0, 1001)]; still {
		t.Error("the unprepared claim's CDI entry is still there")
	}
	if _, err := os.Stat(viewOf1001); !os.IsNotExist(err) {
		t.Errorf("the unprepared claim's view is still there: %v", err)
	}
	if err := api.client.ResourceV1().ResourceClaims("default").Delete(t.Context(), claims[1].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := tryAllocate(t, api, fourth); ok {
		t.Fatal("the claim of 30 GiB was allocated with 20 GiB free")
	}
	again := allocate(t, api, mustCreate(t, api, sizedClaim(t, "share-again", "20Gi", "30")))
	names, perr := k.prepare(again)
	if want := fmt.Sprintf("%s=%s::%d", claimKind, gpu0, 1001); perr != "" || !slices.Equal(names, []string{want}) {
		t.Errorf("prepare after the delete: %v %q, want [%s]", names, perr, want)
	}
	if e := h.claimEntries(t)[fmt.Sprintf("%s::%d", gpu0, 1001)]; !slices.Contains(e.ContainerEdits.Env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30") {
		t.Errorf("a claim of 30%% of the SMs: its entry's env %v", e.ContainerEdits.Env)
	}
	if len(names) == 1 {
		seesSize(names[0], 20<<30)
	}

	// Bad sizes: 0 and less refused by the API server, more than the GPU
	// by the allocator.
	for name, size := range map[string]string{"bad-zero": "0", "bad-negative": "-20Gi"} {
		_, err := createClaim(t, api, sizedClaim(t, name, size, ""))
		if err == nil || !strings.Contains(err.Error(), "must be more than 0") {
			t.Errorf("a claim of %s: %v, want it refused by the claim validation", size, err)
		}
	}
	if _, err := createClaim(t, api, sizedClaim(t, "bad-threads", "1Gi", "0")); err == nil {
		t.Error("a claim of 0% of the SMs was accepted")
	}
	huge := mustCreate(t, api, sizedClaim(t, "share-100", "100Gi", ""))
	if _, ok := tryAllocate(t, api, huge); ok {
		t.Error("a claim of 100 GiB was allocated on an 80 GiB GPU")
	}
	// The fixed slices' example claim (at least 30 GiB) gets a slice of
	// GPU 1, never the sized device.
	tmpl := manifest[resourceapi.ResourceClaimTemplate](t, "claim-example.yaml", "ResourceClaimTemplate")
	fixed := allocate(t, api, mustCreate(t, api, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "fixed"}, Spec: tmpl.Spec.Spec}))
	if r := fixed.Status.Allocation.Devices.Results[0]; r.Device == sized.Name || r.ShareID != nil {
		t.Errorf("the fixed slices' class allocated %s (share %v)", r.Device, r.ShareID)
	}
}

// claimEntries are the entries of the daemon's claims' CDI spec, by name.
func (h *host) claimEntries(t *testing.T) map[string]cdispec.Device {
	t.Helper()
	return h.specEntries(t, "yunion.io-mps-claim.yaml")
}
