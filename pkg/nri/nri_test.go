package nri

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

const (
	gpuA   = gpu.UUID("GPU-4baeae3a-899f-8852-bd11-2e4ce3171eb0")
	gpuB   = gpu.UUID("GPU-76aef7ff-372d-2432-b4b4-beca4d8d3400")
	server = "6a2d3e86-33c5-4b4f-8bbf-7a1e2c3d4e5f"
	pipe   = "/tmp/nvidia-mps/pipe"
)

func slice(g gpu.UUID, i int) cdi.Device {
	d := cdi.FromVirtual(vdev.Device{GPU: gpu.Info{UUID: g}, Index: i, MemoryLimit: 35942, ThreadPercentage: 25}, "", pipe)
	d.IdentityFile = filepath.Join("/var/lib/yunion-mps/identity", string(g)+"."+string(rune('0'+i)))
	return d
}

// devices: the server holds slices 2 and 1 of GPU A (by id); a server of
// a GPU row holds slice 3 by its name.
func devices(t *testing.T) Devices {
	return Devices{PipeRoot: pipe, CDI: cdi.Options{DevRoot: t.TempDir()}, Held: map[gpu.UUID]map[string][]cdi.Device{
		gpuA: {server: {slice(gpuA, 2), slice(gpuA, 1)}, "gpu-pod-2": {slice(gpuA, 3)}},
	}}
}

// cloudpods is a container as Cloudpods' host agent creates it: its
// three variables and its two read-write mounts.
func cloudpods(visible string) Container {
	return Container{Env: []string{"PATH=/bin", "CUDA_MPS_PIPE_DIRECTORY=" + pipe + "/", "NVIDIA_VISIBLE_DEVICES=" + visible, "NVIDIA_DRIVER_CAPABILITIES=all"},
		Mounts: []string{"/dev/shm", pipe, "/etc/hosts"}}
}

func pod(uid, name string) Pod {
	return Pod{UID: uid, Name: name, Labels: map[string]string{PodUIDLabel: uid}}
}

// A Cloudpods pod's container gets the edits of the lowest slice its
// server holds of its GPU: the slice's environment over Cloudpods' (its
// caps among it), the pipe root read-only with the privileged socket
// masked in place of Cloudpods' read-write mount, the identity file.
func TestAdjustGivesTheSlicesEdits(t *testing.T) {
	d := devices(t)
	adj, dec := Adjust(d, pod(server, "gpu-pod-1"), cloudpods(strings.ToLower(string(gpuA))))
	if adj == nil {
		t.Fatalf("no edits: %s", dec.Reason)
	}
	if dec.Device.Name() != vdev.NameOf(gpuA, 1) {
		t.Errorf("edits of %s, want slice 1 (the lowest held)", dec.Device.Name())
	}
	env := map[string]string{}
	for _, e := range adj.GetEnv() {
		env[e.GetKey()] = e.GetValue()
	}
	for k, v := range map[string]string{
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=35942M", "CUDA_VISIBLE_DEVICES": string(gpuA), "CUDA_MPS_PIPE_DIRECTORY": pipe,
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25", vdev.EnvVar: string(vdev.NameOf(gpuA, 1)),
	} {
		if env[k] != v {
			t.Errorf("%s=%q, want %q", k, env[k], v)
		}
	}
	mounts := map[string]*api.Mount{}
	var removed []string
	for _, m := range adj.GetMounts() {
		if strings.HasPrefix(m.GetDestination(), "-") { // NRI's mark of a removal
			removed = append(removed, strings.TrimPrefix(m.GetDestination(), "-"))
			continue
		}
		mounts[m.GetDestination()] = m
	}
	if m := mounts[pipe]; m == nil || m.GetSource() != pipe || !slices.Contains(m.GetOptions(), "ro") {
		t.Errorf("the pipe root: %+v, want it read-only", m)
	}
	if m := mounts[pipe+"/control_privileged"]; m == nil || m.GetSource() != "/dev/null" {
		t.Errorf("the privileged socket: %+v, want /dev/null over it", m)
	}
	if m := mounts["/run/yunion-mps/devices/"+string(gpuA)]; m == nil || m.GetSource() != d.Held[gpuA][server][1].IdentityFile {
		t.Errorf("the identity file: %+v", m)
	}
	slices.Sort(removed)
	if !slices.Equal(removed, []string{"/dev/shm", pipe}) {
		t.Errorf("removed %v, want Cloudpods' read-write /dev/shm and pipe root", removed)
	}

	// A server of Cloudpods' GPU rows is found by its name.
	if adj, dec := Adjust(d, pod("other-id", "gpu-pod-2"), cloudpods(string(gpuA))); adj == nil || dec.Device.Index != 3 {
		t.Errorf("by name: %v %+v", adj, dec)
	}
}

// What is not a Cloudpods pod's MPS container, or whose slice cannot be
// established, is left as it is, saying why.
func TestAdjustLeavesTheRest(t *testing.T) {
	d := devices(t)
	notLabelled := pod(server, "x")
	notLabelled.Labels = nil
	perGPU := devices(t)
	perGPU.PipeRoot = ""
	for _, tc := range []struct {
		name string
		d    Devices
		p    Pod
		c    Container
		why  string
	}{
		{"no label", d, notLabelled, cloudpods(string(gpuA)), "not a Cloudpods pod"},
		{"no MPS", d, pod(server, "x"), Container{Env: []string{"PATH=/bin"}}, "no CUDA_MPS_PIPE_DIRECTORY"},
		{"another pipe", d, pod(server, "x"), Container{Env: []string{"CUDA_MPS_PIPE_DIRECTORY=/elsewhere", "NVIDIA_VISIBLE_DEVICES=" + string(gpuA)}}, "not the single layout's pipe root"},
		{"per-GPU layout", perGPU, pod(server, "x"), cloudpods(string(gpuA)), "not the single layout's pipe root"},
		{"two GPUs", d, pod(server, "x"), cloudpods(string(gpuA) + "," + string(gpuB)), "names 2 GPUs"},
		{"no GPU", d, pod(server, "x"), cloudpods(""), "names 0 GPUs"},
		{"nothing held there", d, pod(server, "x"), cloudpods(string(gpuB)), "holds no slice of GPU"},
		{"another server", d, pod("stranger", "stranger"), cloudpods(string(gpuA)), "holds no slice"},
	} {
		if adj, dec := Adjust(tc.d, tc.p, tc.c); adj != nil || !strings.Contains(dec.Reason, tc.why) {
			t.Errorf("%s: %v, %q; want no edits because %q", tc.name, adj, dec.Reason, tc.why)
		}
	}
}

// Add files each slice under its GPU and holder, whatever order they come
// in; Adjust still takes the lowest, and Set hands them to the plugin.
func TestAddFilesSlicesByGPUAndHolder(t *testing.T) {
	d := Devices{PipeRoot: pipe, CDI: cdi.Options{DevRoot: t.TempDir()}}
	d.Add(server, slice(gpuA, 2))
	d.Add("gpu-pod-2", slice(gpuA, 3))
	d.Add(server, slice(gpuA, 1))
	d.Add(server, slice(gpuB, 0))
	if len(d.Held) != 2 || len(d.Held[gpuA][server]) != 2 || len(d.Held[gpuA]["gpu-pod-2"]) != 1 || len(d.Held[gpuB][server]) != 1 {
		t.Fatalf("held %+v", d.Held)
	}
	p := New(filepath.Join(t.TempDir(), "nri.sock"), nil)
	p.Set(d)
	if _, dec := Adjust(p.Devices(), pod(server, ""), cloudpods(string(gpuA))); dec.Device.Name() != vdev.NameOf(gpuA, 1) {
		t.Errorf("edits of %s (%s), want slice 1", dec.Device.Name(), dec.Reason)
	}
}
