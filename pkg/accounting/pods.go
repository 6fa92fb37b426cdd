package accounting

import (
	"errors"
	"fmt"
	"strings"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/pod"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// Cloudpods' own pods (issue 45). Cloudpods' host agent gives a pod the
// single layout's pipe root and nothing of ours: no identity file, no
// caps in its environment. Its processes are billed by their cgroup
// instead (pkg/pod: the container's cgroup, the server CRI recorded for
// it), which no process of the pod can change, to a pod: the processes of
// one Cloudpods server on one GPU, held together to the caps of the slices
// that server holds there, as the backend's rows last said (per-slice rows
// name the server's id, Cloudpods' GPU rows its name). A pod is billed,
// judged and terminated as a virtual device is (Account, Decide, the
// Enforcer, the limit escapes of limit.go, at connect too), under its
// name, PodName. What cannot be established (a pod's cgroup whose server
// cannot be read; a server holding no slice of the GPU by the last rows)
// is reported, never terminated: the rows are at most a sync interval
// old, and a server attached since must not lose its processes.

// SourcePod: the process is in a Cloudpods pod's cgroup (pkg/pod), billed
// to its server's pod on the GPU.
const SourcePod = "pod"

// podInfix is what a pod's name has between its GPU and its server.
const podInfix = "::pod/"

// PodName is the name of the pod of server on GPU g, server as the rows
// name the slices' holder (an id, or a name in Cloudpods' GPU rows): the
// key a pod has beside the virtual devices in caps, Usage.PerDevice and
// an Action's Device, and the name /status and /metrics give it.
func PodName(g gpu.UUID, server string) string { return string(g) + podInfix + server }

// ParsePodName splits a name made by PodName; false for any other name.
func ParsePodName(name string) (gpu.UUID, string, bool) {
	g, server, ok := strings.Cut(name, podInfix)
	if !ok || g == "" || server == "" || strings.ContainsAny(g, ": \t\n") {
		return "", "", false
	}
	return gpu.UUID(g), server, true
}

// gpuOf is the GPU of a virtual device's or a pod's name.
func gpuOf(name string) (gpu.UUID, bool) {
	if g, _, ok := ParsePodName(name); ok {
		return g, true
	}
	g, _, err := vdev.ParseName(name)
	return g, err == nil
}

// PodFinder tells the Cloudpods pod of a process from its cgroup file:
// *pod.Finder. pod.ErrNotPod for a process in none.
type PodFinder interface {
	Find(cgroup []byte) (pod.Pod, error)
}

// ErrNoPodSlice: a pod's server holds no slice of the GPU, by the rows
// last synced. Reported, never terminated.
var ErrNoPodSlice = errors.New("its server holds no slice of this GPU in the rows last synced")

// podDevice is the pod p is billed to on GPU g: its server's, by id, else
// by name (Cloudpods' GPU rows list names), among caps.
func podDevice(g gpu.UUID, p pod.Pod, caps map[string]uint64) (string, error) {
	if name := PodName(g, p.Server); caps[name] > 0 {
		return name, nil
	}
	if p.Name != "" {
		if name := PodName(g, p.Name); caps[name] > 0 {
			return name, nil
		}
	}
	named := ""
	if p.Name != "" {
		named = " (" + p.Name + ")"
	}
	return "", fmt.Errorf("Cloudpods pod of server %s%s, container %s: %w; reported, never terminated", p.Server, named, short(p.Container), ErrNoPodSlice)
}

// short is a container id as containerd's tools print it.
func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
