package agent

import (
	"maps"
	"slices"
	"strings"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/pod"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// Cloudpods' own pods (issue 45): the wiring of pkg/pod into the
// accounting, and of the pods it measured into the status. The rules are
// pkg/accounting's (pods.go); here are what they are fed (the slices each
// server holds, from the backend's last rows) and what is shown.

// podFinder is the accounting's finder of Cloudpods pods, nil (no pods
// looked for) when mps_pod_cgroup_parent is empty.
func podFinder(hc *config.HostConf) accounting.PodFinder {
	f := pod.NewFinder(pod.Options{CgroupParent: hc.PodCgroupParent, StateDir: hc.ContainerdStateDirectory,
		Namespace: pod.DefaultNamespace, ServersPath: hc.ServersPath})
	if f == nil {
		return nil
	}
	return f
}

// podHolding is what one server holds of one GPU: first is its slice of
// the lowest index, whose CDI edits (and view) the NRI plugin gives its
// pod's containers.
type podHolding struct {
	gpu    gpu.UUID
	slices int
	cap    units.Bytes
	first  vdev.Name
}

// podHoldings are, by pod name, the slices of the GPUs of uuids each
// holder of the last rows holds (a per-slice row names the server's id,
// a GPU row of Cloudpods its name): a pod's cap there is theirs summed.
// It runs in the main loop, which owns a.listed.
func (a *Agent) podHoldings(uuids []gpu.UUID) map[string]podHolding {
	if a.config().Host.PodCgroupParent == "" {
		return nil
	}
	out := map[string]podHolding{}
	for _, l := range a.listed {
		g := l.Device.GPU.UUID
		if l.Guest == "" || !slices.Contains(uuids, g) {
			continue
		}
		name := accounting.PodName(g, l.Guest)
		h := out[name]
		if h.slices == 0 || l.Device.Index < firstIndex(h.first) {
			h.first = l.Device.Name()
		}
		h.gpu, h.slices, h.cap = g, h.slices+1, h.cap+l.Device.MemoryLimit.Bytes()
		out[name] = h
	}
	return out
}

func firstIndex(n vdev.Name) int {
	_, i, _ := vdev.ParseName(n.String())
	return i
}

// withPodViews is r as the views are written from it: each pod's use on
// its first slice's view too, the view the NRI plugin gives its
// containers (a pod's clients are billed to the pod, not to the slice).
func (in acctInputs) withPodViews(r accounting.Report) accounting.Report {
	if len(in.pods) == 0 || r.Usage.PerDevice == nil {
		return r
	}
	per := maps.Clone(r.Usage.PerDevice)
	for name, h := range in.pods {
		p, ok := per[name]
		if !ok || p.UsedBytes == 0 {
			continue
		}
		d := per[h.first.String()]
		d.UsedBytes += p.UsedBytes
		per[h.first.String()] = d
	}
	r.Usage.PerDevice = per
	return r
}

// addPods puts the pods' caps beside the devices'.
func (in acctInputs) addPods(caps map[string]uint64) {
	for name, h := range in.pods {
		caps[name] = uint64(h.cap)
	}
}

// notePods puts the pods that have clients on the GPUs a pass sampled
// (sampled nil: every GPU) into the status, with held (the slices their
// servers hold); the other GPUs' stay as the last pass that sampled them
// left them. A pass of no accounting (off) clears them.
func (a *Agent) notePods(r accounting.Report, sampled map[gpu.UUID]bool, held map[string]podHolding) {
	last := map[string]string{}
	for _, s := range r.Steps {
		last[s.Device] = s.Step
	}
	over := map[string]bool{}
	for _, o := range r.Decision.Over {
		over[o.Device] = true
	}
	var pods []status.Pod
	for _, name := range slices.Sorted(maps.Keys(r.Usage.PerDevice)) {
		d := r.Usage.PerDevice[name]
		if _, _, ok := accounting.ParsePodName(name); !ok || len(d.Clients) == 0 {
			continue
		}
		p := d.Clients[0].Pod
		h := held[name]
		pods = append(pods, status.Pod{Name: name, Server: p.Server, ServerName: p.Name, GPU: d.GPU.String(), GPUIndex: -1,
			Slices: h.slices, MemoryLimit: h.cap, UsedBytes: units.Bytes(d.UsedBytes), Clients: len(d.Clients),
			OverCap: over[name], LastStep: last[name]})
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.Usage.PerDevice != nil && sampled != nil {
		for _, p := range a.status.Pods {
			if !sampled[gpu.UUID(p.GPU)] {
				pods = append(pods, p)
			}
		}
		slices.SortFunc(pods, func(x, y status.Pod) int { return strings.Compare(x.Name, y.Name) })
	}
	for i := range pods {
		for _, g := range a.status.GPUs {
			if g.UUID == pods[i].GPU {
				pods[i].GPUIndex = g.Index
			}
		}
	}
	a.status.Pods = pods
}
