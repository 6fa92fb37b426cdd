package acctloop

import (
	"maps"
	"slices"
	"sort"

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
// server holds, from the backend's last answer: Inputs.Held) and what is
// shown.

// PodFinder is the accounting's finder of Cloudpods pods on the host of
// hc (accounting.Options.Pods), nil (no pods looked for) when
// mps_pod_cgroup_parent is empty.
func PodFinder(hc *config.HostConf) accounting.PodFinder {
	f := pod.NewFinder(pod.Options{CgroupParent: hc.PodCgroupParent, StateDir: hc.ContainerdStateDirectory,
		Namespace: pod.DefaultNamespace, ServersPath: hc.ServersPath})
	if f == nil {
		return nil
	}
	return f
}

// Held is a device a holder keeps, as the backend answered: a per-slice
// row names the server's id, a GPU row of Cloudpods its name.
type Held struct {
	Device vdev.Device
	Holder string
}

// podHolding is what one server holds of one GPU: first is the index of
// its slice of the lowest index, whose CDI edits (and view) the NRI plugin
// gives its pod's containers.
type podHolding struct {
	gpu    gpu.UUID
	slices int
	cap    units.Bytes
	first  int
}

// podHoldings are, by pod name, the slices of the enforced GPUs each
// holder of in.Held holds: a pod's cap there is theirs summed.
func (in Inputs) podHoldings() map[string]podHolding {
	if in.Held == nil {
		return nil
	}
	out := map[string]podHolding{}
	for _, h := range in.Held {
		g := h.Device.GPU.UUID
		if h.Holder == "" || !slices.Contains(in.GPUs, g) {
			continue
		}
		name := accounting.PodName(g, h.Holder)
		p := out[name]
		if p.slices == 0 || h.Device.Index < p.first {
			p.first = h.Device.Index
		}
		p.gpu, p.slices, p.cap = g, p.slices+1, p.cap+h.Device.MemoryLimit.Bytes()
		out[name] = p
	}
	return out
}

// withPodViews is r as the views are written from it: each pod's use on
// its first slice's view too, the view the NRI plugin gives its
// containers (a pod's clients are billed to the pod, not to the slice).
func (in Inputs) withPodViews(r accounting.Report) accounting.Report {
	if len(in.pods) == 0 || r.Usage.PerDevice == nil {
		return r
	}
	per := maps.Clone(r.Usage.PerDevice)
	for name, h := range in.pods {
		p, ok := per[name]
		if !ok || p.UsedBytes == 0 {
			continue
		}
		first := vdev.NameOf(h.gpu, h.first).String()
		d := per[first]
		d.UsedBytes += p.UsedBytes
		per[first] = d
	}
	r.Usage.PerDevice = per
	return r
}

// addPods puts the pods' caps beside the devices'.
func (in Inputs) addPods(caps map[string]uint64) {
	for name, h := range in.pods {
		caps[name] = uint64(h.cap)
	}
}

// notePods puts the pods that have clients on the GPUs a pass sampled
// (sampled nil: every GPU) into the status, with held (the slices their
// servers hold); the other GPUs' stay as the last pass that sampled them
// left them. A pass of no accounting (off) clears them.
func (l *Loop) notePods(r accounting.Report, sampled map[gpu.UUID]bool, held map[string]podHolding) {
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
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.Usage.PerDevice != nil && sampled != nil {
		for _, p := range l.st.pods {
			if !sampled[gpu.UUID(p.GPU)] {
				pods = append(pods, p)
			}
		}
		sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	}
	l.st.pods = pods
}

// fillPods puts the pods in st, each with its GPU's index as st lists the
// GPUs (-1: a GPU it does not list).
func (p *statusPart) fillPods(st *status.Status) {
	st.Pods = slices.Clone(p.pods)
	for i := range st.Pods {
		st.Pods[i].GPUIndex = -1
		for _, g := range st.GPUs {
			if g.UUID == st.Pods[i].GPU {
				st.Pods[i].GPUIndex = g.Index
			}
		}
	}
}
