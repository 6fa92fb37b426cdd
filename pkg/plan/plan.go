// Package plan decides, from host.conf, the device YAML and the GPUs NVML
// sees, how many virtual devices each GPU is split into. It is where the
// checks that need the GPUs live (does the path name a GPU, does N fit the
// GPU's MPS client limit), so `mps-daemon check-config` and the daemon report
// the same problems, each pointing at the line that causes it.
package plan

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/pci"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// SourceReplicas is GPUPlan.Source when VirtualNumber is host.conf's
// cuda_mps_replicas.
const SourceReplicas = "cuda_mps_replicas"

// GPUPlan is what one GPU becomes.
type GPUPlan struct {
	GPU gpu.Info
	// VirtualNumber is the entry's virtual_number (or cuda_mps_replicas):
	// how many fixed slices, or, shared by claims, how many claims at once.
	VirtualNumber int
	// Source says where VirtualNumber came from: "FILE:LINE" of the device
	// YAML entry, or SourceReplicas.
	Source string
	// QoS is the entry's mps_qos (zero without one); Devices carry its
	// classes and shares.
	QoS vdev.QoS
	// Sharing is the entry's sharing: SharingClaims, or "" for fixed
	// slices. A GPU shared by claims has one device, the whole GPU (its
	// control daemon's defaults: a claim's client lowers them to its
	// size), and VirtualNumber is how many claims it takes at once.
	Sharing config.Sharing
	Devices []vdev.Device
}

// Defaults are what the GPU's MPS control daemon must hold for its devices
// (vdev.DefaultsOf): the largest share and, with batch devices, below
// normal client priority.
func (g GPUPlan) Defaults() vdev.ServerDefaults { return vdev.DefaultsOf(g.Devices) }

// SharedDefaults are the defaults of one control daemon serving every GPU
// of the plan (the single pipe layout, where containers without our CDI
// edits get nothing but the server's defaults): the most protective of the
// GPUs' (vdev.MostProtective).
func (p *Plan) SharedDefaults() vdev.ServerDefaults {
	ds := make([]vdev.ServerDefaults, 0, len(p.GPUs))
	for _, g := range p.GPUs {
		ds = append(ds, g.Defaults())
	}
	return vdev.MostProtective(ds...)
}

// SharedMemoryLimits are the pinned memory limits, by device ordinal, that
// one control daemon serving the GPUs of order (its CUDA_VISIBLE_DEVICES,
// in order) must hold for this plan (the single pipe layout). MPS holds a
// client's ordinal k to the daemon's ordinal k limit, not to the limit of
// the GPU the daemon numbers k (docs/gpu-runs/mps-probe-multi.txt): a
// container of ours sees its own GPU alone, as its ordinal 0, and lowers
// ordinal 0's limit to its device's cap with CUDA_MPS_PINNED_DEVICE_MEM_LIMIT,
// which can lower a limit and never raise it. So ordinal 0 holds the
// largest cap of any planned GPU of order, within which every container's
// cap falls, and every other ordinal its own GPU's cap, which is what a
// client that sees every GPU (Cloudpods' pods) gets there. A GPU of order
// that the plan does not share gets no limit.
func (p *Plan) SharedMemoryLimits(order []gpu.UUID) []units.MiB {
	caps := map[gpu.UUID]units.MiB{}
	for _, g := range p.GPUs {
		if len(g.Devices) > 0 {
			caps[g.GPU.UUID] = g.Cap()
		}
	}
	out := make([]units.MiB, len(order))
	for i, u := range order {
		out[i] = caps[u]
		out[0] = max(out[0], caps[u])
	}
	return out
}

// SharedOrder is the device list of one control daemon serving the
// planned GPUs (the single pipe layout): by their cap, largest first, then
// in PCI order (GPUs' order), so that ordinal 0's limit (the largest cap,
// SharedMemoryLimits) is its GPU's own cap too.
func (p *Plan) SharedOrder() []gpu.UUID {
	gps := slices.Clone(p.GPUs)
	sort.SliceStable(gps, func(i, j int) bool { return gps[i].Cap() > gps[j].Cap() })
	out := make([]gpu.UUID, len(gps))
	for i, gp := range gps {
		out[i] = gp.GPU.UUID
	}
	return out
}

// Cap is the memory cap of the GPU's devices (all alike), 0 with none.
func (g GPUPlan) Cap() units.MiB {
	if len(g.Devices) == 0 {
		return 0
	}
	return g.Devices[0].MemoryLimit
}

// Plan is the whole host's sharing plan.
type Plan struct {
	// Enabled is host.conf's enable_cuda_mps. When false no GPU is shared,
	// whatever the device YAML says.
	Enabled bool
	// GPUs are the shared GPUs, sorted by PCI address.
	GPUs []GPUPlan
	// Unshared are the GPUs that no NVIDIA_MPS entry names, when the device
	// YAML has such entries: they stay whole, and saying so saves an
	// operator from wondering where a GPU went.
	Unshared []gpu.Info
	// Skipped are the device YAML entries of other agents, for the caller to
	// log.
	Skipped []config.DeviceEntry
	// Threads is host.conf's thread policy (mps_thread_percentage).
	Threads config.ThreadPolicy
}

// Build makes the plan. When the device YAML has NVIDIA_MPS entries, exactly
// the GPUs they name are shared, each into its virtual_number; when it has
// none (or there is no file, df nil), every GPU is split into
// cuda_mps_replicas, as Cloudpods does.
//
// Every problem is reported, joined, as *config.Error pointing at the line
// responsible. The plan returned alongside an error still holds the GPUs that
// had none, so a caller may choose to go on sharing those.
func Build(hc *config.HostConf, df *config.DeviceFile, gpus []gpu.Info, r gpu.Resolver) (*Plan, error) {
	if hc == nil {
		hc = config.DefaultHostConf()
	}
	p := &Plan{Enabled: hc.EnableCudaMPS, Threads: hc.Threads}
	if !p.Enabled {
		return p, nil
	}
	if df != nil {
		p.Skipped = df.Skipped
	}
	var errs []error
	// The file host.conf errors point at; DefaultHostConf has no Path.
	hcFile := cmp.Or(hc.Path, "host.conf")
	threads := hc.Threads
	if df == nil || len(df.Entries) == 0 {
		for _, g := range gpus {
			if msg := overLimit(g, hc.CudaMPSReplicas, ""); msg != "" {
				errs = append(errs, &config.Error{File: hcFile, Line: hc.Line(SourceReplicas), Field: SourceReplicas, Msg: msg})
				continue
			}
			p.GPUs = append(p.GPUs, newGPUPlan(g, hc.CudaMPSReplicas, SourceReplicas, threads, vdev.QoS{}))
		}
	} else {
		claimed := map[pci.Address]config.DeviceEntry{}
		for _, e := range df.Entries {
			g, err := r.Resolve(e.Path, gpus)
			if err != nil {
				errs = append(errs, &config.Error{File: df.Path, Line: e.Line, Field: e.Field("path"), Msg: err.Error()})
				continue
			}
			if first, dup := claimed[g.PCI]; dup {
				errs = append(errs, &config.Error{File: df.Path, Line: e.Line, Field: e.Field("path"),
					Msg: fmt.Sprintf("%q and %s (%q, line %d) name the same GPU, %s (%s): keep one entry per GPU",
						e.Path, first.Field("path"), first.Path, first.Line, g.PCI, g.UUID)})
				continue
			}
			claimed[g.PCI] = e
			if msg := overLimit(g, e.VirtualNumber, e.Sharing); msg != "" {
				errs = append(errs, &config.Error{File: df.Path, Line: e.Line, Field: e.Field("virtual_number"), Msg: msg})
				continue
			}
			if e.Sharing.Claims() && hc.Layout() == config.LayoutSingle {
				errs = append(errs, &config.Error{File: df.Path, Line: e.Line, Field: e.Field("sharing"),
					Msg: fmt.Sprintf("sharing: %s needs a control daemon of the GPU's own (mps_pipe_layout %s): the single layout's one daemon has one default for every GPU, which a claim's client could only lower",
						config.SharingClaims, config.LayoutPerGPU)})
				continue
			}
			gp := newGPUPlan(g, e.VirtualNumber, fmt.Sprintf("%s:%d", df.Path, e.Line), threads, qosOf(e))
			if e.Sharing.Claims() {
				gp = claimsPlan(g, e.VirtualNumber, gp.Source, threads)
			}
			p.GPUs = append(p.GPUs, gp)
		}
		for _, g := range gpus {
			if _, named := claimed[g.PCI]; !named {
				p.Unshared = append(p.Unshared, g)
			}
		}
		sort.Slice(p.Unshared, func(i, j int) bool { return p.Unshared[i].PCI.Compare(p.Unshared[j].PCI) < 0 })
	}
	sort.Slice(p.GPUs, func(i, j int) bool { return p.GPUs[i].GPU.PCI.Compare(p.GPUs[j].GPU.PCI) < 0 })
	return p, errors.Join(errs...)
}

// VirtualDevices counts the virtual devices of the plan.
func (p *Plan) VirtualDevices() int {
	n := 0
	for _, g := range p.GPUs {
		n += len(g.Devices)
	}
	return n
}

func newGPUPlan(g gpu.Info, n int, source string, threads config.ThreadPolicy, q vdev.QoS) GPUPlan {
	return GPUPlan{GPU: g, VirtualNumber: n, Source: source, QoS: q, Devices: vdev.Split(g, n, threads.Percentage(n), q)}
}

// claimsPlan is a GPU shared by at most n claims of any size: one device,
// the whole GPU with the thread share of one device, whose caps are its
// control daemon's defaults.
func claimsPlan(g gpu.Info, n int, source string, threads config.ThreadPolicy) GPUPlan {
	return GPUPlan{GPU: g, VirtualNumber: n, Source: source, Sharing: config.SharingClaims, Devices: vdev.Split(g, 1, threads.Percentage(1), vdev.QoS{})}
}

// qosOf is an entry's mps_qos in vdev's terms; config checked the slices
// against virtual_number (distinct, in range, ascending), which vdev takes
// on trust. config may not import vdev nor vdev config (tests/arch), so
// the two types meet here.
func qosOf(e config.DeviceEntry) vdev.QoS {
	if e.QoS == nil {
		return vdev.QoS{}
	}
	return vdev.QoS{LatencySlices: e.QoS.LatencySlices, ReservePercent: e.QoS.ReservePercent}
}

// overLimit explains why n virtual devices (or claims, for a GPU shared
// by claims) do not fit on g, or returns "". Each virtual device or claim
// is at least one MPS client, and a device accepts only so many client
// contexts; past that, clients fail to start.
func overLimit(g gpu.Info, n int, sharing config.Sharing) string {
	what := "virtual devices"
	if sharing.Claims() {
		what = "claims"
	}
	if n < 1 {
		return fmt.Sprintf("%d %s: must be at least 1", n, what)
	}
	if limit := g.Architecture.MaxMPSClients(); n > limit {
		return fmt.Sprintf("%d %s exceed the %d MPS clients a %s GPU accepts (%s %s at %s)",
			n, what, limit, g.Architecture, g.Name, g.UUID, g.PCI)
	}
	return ""
}
