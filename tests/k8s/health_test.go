package k8s

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"

	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
)

// healthStream is the kubelet's DRAResourceHealth stream from the plugin:
// the last health it reported of each device.
type healthStream struct {
	t      *testing.T
	stream drahealthv1.DRAResourceHealth_NodeWatchResourcesClient
	last   map[string]drahealthv1.HealthStatus
}

func (k *kubelet) watchHealth() *healthStream {
	k.t.Helper()
	if !slices.Contains(k.services, drahealthv1.DRAResourceHealthService) {
		k.t.Fatalf("the plugin's registration offers %v, not %s", k.services, drahealthv1.DRAResourceHealthService)
	}
	ctx, cancel := context.WithCancel(k.t.Context())
	k.t.Cleanup(cancel)
	s, err := k.health.NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
	if err != nil {
		k.t.Fatalf("NodeWatchResources: %v", err)
	}
	return &healthStream{t: k.t, stream: s, last: map[string]drahealthv1.HealthStatus{}}
}

// until reads reports until cond holds of the devices' last health.
func (h *healthStream) until(what string, cond func(map[string]drahealthv1.HealthStatus) bool) {
	h.t.Helper()
	for !cond(h.last) {
		r, err := h.stream.Recv()
		if err != nil {
			h.t.Fatalf("%s: the health stream ended: %v; last %v", what, err, h.last)
		}
		for _, d := range r.Devices {
			if d.Device.PoolName != nodeName || d.HealthCheckTimeoutSeconds <= 0 || d.Message == "" {
				h.t.Errorf("health report %+v", d)
			}
			h.last[d.Device.DeviceName] = d.Health
		}
	}
}

// A GPU whose MPS server is in FAULT: its devices stay published with the
// driver's taint, so the scheduler's allocator hands none of them out; the
// kubelet's health stream reports them (the prepared one too) unhealthy,
// which is what a pod's status shows; once the fault is gone the taints go
// and the devices are healthy and allocatable again. The other GPU is
// untouched throughout.
func TestAnUnhealthyGPUIsTaintedAndItsHealthStreamed(t *testing.T) {
	api, h, d := newNode(t, "mps_health_interval: 1s")
	pool := waitPool(t, api, "three devices", func(p poolView) bool { return len(p) == 3 }, d)
	var sliced []string
	gpu1 := ""
	for name, dv := range pool {
		if dv.AllowMultipleAllocations == nil {
			sliced, gpu1 = append(sliced, name), attr(dv, "uuid")
		}
	}
	k := register(t, h.registrarDir, driverName)
	tmpl := manifest[resourceapi.ResourceClaimTemplate](t, "claim-example.yaml", "ResourceClaimTemplate")
	fixed := func(name string) *resourceapi.ResourceClaim {
		return mustCreate(t, api, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: tmpl.Spec.Spec})
	}
	held := allocate(t, api, fixed("held"))
	if _, perr := k.prepare(held); perr != "" {
		t.Fatalf("prepare: %s", perr)
	}
	heldDevice := held.Status.Allocation.Devices.Results[0].Device
	health := k.watchHealth()
	health.until("every device healthy", func(m map[string]drahealthv1.HealthStatus) bool {
		return len(m) == 3 && !slices.ContainsFunc(slices.Collect(mapValues(m)), func(s drahealthv1.HealthStatus) bool { return s != drahealthv1.HealthStatus_HEALTHY })
	})

	// A client of GPU 1's MPS server hits a fatal exception: the server
	// reports FAULT until the client is gone.
	sim := mpssim.New(nil)
	pipe := filepath.Join(h.dir, "pipe", gpu1)
	pid := os.Getpid()
	if _, err := sim.AddClient(pipe, pid); err != nil {
		t.Fatal(err)
	}
	if err := sim.Fault(pipe, pid); err != nil {
		t.Fatal(err)
	}
	waitPool(t, api, "GPU 1's devices tainted, GPU 0's not", func(p poolView) bool {
		for name, dv := range p {
			tainted := len(dv.Taints) == 1 && dv.Taints[0].Key == driverName+"/unhealthy" && dv.Taints[0].Effect == resourceapi.DeviceTaintEffectNoSchedule
			if slices.Contains(sliced, name) != tainted {
				return false
			}
		}
		return len(p) == 3
	}, d)
	health.until("GPU 1's devices unhealthy, the prepared one included", func(m map[string]drahealthv1.HealthStatus) bool {
		for name, s := range m {
			if slices.Contains(sliced, name) != (s == drahealthv1.HealthStatus_UNHEALTHY) {
				return false
			}
		}
		return m[heldDevice] == drahealthv1.HealthStatus_UNHEALTHY
	})
	pending := fixed("pending")
	if _, ok := tryAllocate(t, api, pending); ok {
		t.Error("a device of the faulted GPU was allocated")
	}

	if err := sim.RemoveClient(pipe, pid); err != nil {
		t.Fatal(err)
	}
	waitPool(t, api, "the taints gone", func(p poolView) bool {
		for _, dv := range p {
			if len(dv.Taints) > 0 {
				return false
			}
		}
		return len(p) == 3
	}, d)
	health.until("every device healthy again", func(m map[string]drahealthv1.HealthStatus) bool {
		return !slices.ContainsFunc(slices.Collect(mapValues(m)), func(s drahealthv1.HealthStatus) bool { return s != drahealthv1.HealthStatus_HEALTHY })
	})
	if c, ok := tryAllocate(t, api, pending); !ok || c.Status.Allocation.Devices.Results[0].Device == heldDevice {
		t.Errorf("healthy again, the free slice is not allocated: %v", ok)
	}
}

func mapValues[K comparable, V any](m map[K]V) func(func(V) bool) {
	return func(yield func(V) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// A checkpoint truncated while the daemon was down (kill -9) is moved
// aside and rebuilt from the API server's claims: the fixed slice and both
// shares are prepared still, with the same CDI names, the shares' entries
// at the indexes they had; the slice is held (a second claim on it is
// refused). Until the rebuild the kubelet is told to try again.
func TestACorruptCheckpointIsRebuiltFromTheAPIServer(t *testing.T) {
	api, h, d := newNode(t)
	waitPool(t, api, "three devices", func(p poolView) bool { return len(p) == 3 }, d)
	k := register(t, h.registrarDir, driverName)
	tmpl := manifest[resourceapi.ResourceClaimTemplate](t, "claim-example.yaml", "ResourceClaimTemplate")
	claims := []*resourceapi.ResourceClaim{
		allocate(t, api, mustCreate(t, api, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "fixed"}, Spec: tmpl.Spec.Spec})),
		allocate(t, api, mustCreate(t, api, sizedClaim(t, "share-a", "30Gi", ""))),
		allocate(t, api, mustCreate(t, api, sizedClaim(t, "share-b", "10Gi", "20"))),
	}
	answers := map[string][]string{}
	for _, c := range claims {
		names, perr := k.prepare(c)
		if perr != "" {
			t.Fatalf("prepare %s: %s", c.Name, perr)
		}
		answers[c.Name] = names
	}
	// Unprepared: its share's index goes back; the one after keeps its own.
	k.unprepare(claims[1])
	delete(answers, claims[1].Name)
	if err := api.client.ResourceV1().ResourceClaims("default").Delete(t.Context(), claims[1].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	entries := h.claimEntries(t)

	d.Kill(t)
	cp := filepath.Join(h.pluginDir, "checkpoint.json")
	b, err := os.ReadFile(cp)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cp, b[:len(b)/3], 0o600); err != nil {
		t.Fatal(err)
	}
	d = h.start(t)
	eventually(t, "the restarted plugin's sockets", func() (bool, string) {
		return strings.Contains(d.Output(), "kubelet plugin started"), "not yet"
	})
	k = register(t, h.registrarDir, driverName)
	for _, c := range []*resourceapi.ResourceClaim{claims[0], claims[2]} {
		eventually(t, "claim "+c.Name+" prepared as before", func() (bool, string) {
			names, perr := k.prepare(c)
			if perr != "" && !strings.Contains(perr, "being rebuilt") {
				t.Fatalf("prepare %s after the rebuild: %s", c.Name, perr)
			}
			return perr == "" && slices.Equal(names, answers[c.Name]), fmt.Sprint(names, perr)
		})
	}
	if aside, _ := filepath.Glob(cp + ".corrupt-*"); len(aside) != 1 {
		t.Errorf("the corrupt checkpoint is not kept: %v", aside)
	}
	if !strings.Contains(d.Output(), "the DRA checkpoint is corrupt") {
		t.Error("the corrupt checkpoint is not reported")
	}
	if got := h.claimEntries(t); !equalKeys(got, entries) {
		t.Errorf("the claims' CDI entries after the rebuild: %v, before: %v", keys(got), keys(entries))
	}
	thief := mustCreate(t, api, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "thief"}, Spec: tmpl.Spec.Spec})
	thief.Status.Allocation = claims[0].Status.Allocation.DeepCopy()
	if thief, err = api.client.ResourceV1().ResourceClaims("default").UpdateStatus(t.Context(), thief, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, perr := k.prepare(thief); !strings.Contains(perr, "held by claim "+string(claims[0].UID)) {
		t.Errorf("a second claim on the rebuilt claim's slice: %q, want it refused as held", perr)
	}
}

func keys[V any](m map[string]V) []string {
	return slices.Sorted(func(y func(string) bool) {
		for k := range m {
			if !y(k) {
				return
			}
		}
	})
}

func equalKeys[V any](a, b map[string]V) bool { return slices.Equal(keys(a), keys(b)) }
