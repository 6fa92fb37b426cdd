package agent

import (
	"context"
	"maps"
	"slices"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
	"yunion.io/x/mps-daemon/pkg/view"
)

// acctInputs is what the accounting needs of the reconcile: a snapshot
// the main loop (which owns the plan and the GPUs' state) hands to the
// accounting loop (which owns the Accountant, acctloop.go), read by no one
// else afterwards.
type acctInputs struct {
	policy config.AccountingPolicy
	// uuids are the GPUs with enforced caps, sorted; devs their planned
	// devices; defaults what each GPU's control daemon holds (QoS).
	uuids    []gpu.UUID
	devs     []vdev.Device
	defaults map[gpu.UUID]vdev.ServerDefaults
	// terms are the GPUs' MPS controls, by UUID.
	terms        map[gpu.UUID]accounting.Terminator
	serverMemory map[gpu.UUID]units.MiB
	// identityRequired: only the per-GPU layout's pipe directories reach
	// containers through the CDI edits alone, which always carry the
	// identity file.
	identityRequired bool
	// logs are the control daemons' control.log files, each with the GPUs
	// its daemon serves (one in the per-GPU layout, all in the single).
	logs map[string][]gpu.UUID
	// claims are the Kubernetes claims' own devices as the backend last
	// answered (a.claims); nil without.
	claims []vdev.Device
	// viewLibrary is the view's library file name while containers get
	// the view ("" otherwise): a client without it in its memory map sees
	// the whole GPU, and is reported.
	viewLibrary string
}

// accountInputs is the snapshot of the reconcile's state the accounting
// works from. It runs in the main loop.
func (a *Agent) accountInputs() acctInputs {
	in := acctInputs{policy: a.config().Host.Accounting, defaults: map[gpu.UUID]vdev.ServerDefaults{},
		terms: map[gpu.UUID]accounting.Terminator{}, logs: map[string][]gpu.UUID{}, identityRequired: !a.config().single()}
	for uuid := range a.planned {
		if gs := a.gpus[uuid]; gs != nil && gs.enforced {
			in.uuids = append(in.uuids, uuid)
			in.terms[uuid] = gs.ctl
			in.defaults[uuid] = serverDefaultsHeld(gs)
			log := mps.ControlLog(gs.env)
			in.logs[log] = append(in.logs[log], uuid)
		}
	}
	slices.Sort(in.uuids)
	for _, uuid := range in.uuids {
		in.devs = append(in.devs, a.planned[uuid]...)
	}
	for _, g := range in.logs {
		slices.Sort(g)
	}
	in.serverMemory = a.serverMemoryLimits(in.uuids)
	for _, h := range a.claims {
		in.claims = append(in.claims, h.Device)
	}
	if a.viewGiven.On() {
		in.viewLibrary = view.LibraryFile
	}
	return in
}

// scope is what a pass checks: the devices of the enforced GPUs and, on
// those GPUs, the claims' own devices (the backend's last answer), each billed
// against its claim's size and held to its thread share (claimQoS); their
// caps, and the QoS of the batch ones.
func (in acctInputs) scope() (map[string]uint64, map[string]accounting.DeviceQoS) {
	qos := map[string]accounting.DeviceQoS{}
	enforced := map[gpu.UUID]bool{}
	for _, uuid := range in.uuids {
		enforced[uuid] = true
	}
	devs := slices.Clone(in.devs)
	byGPU := map[gpu.UUID][]vdev.Device{}
	for _, d := range in.devs {
		byGPU[d.GPU.UUID] = append(byGPU[d.GPU.UUID], d)
	}
	for _, uuid := range in.uuids {
		maps.Copy(qos, accounting.BatchQoS(byGPU[uuid], in.defaults[uuid]))
	}
	for _, d := range in.claims {
		if enforced[d.GPU.UUID] {
			devs = append(devs, d)
			maps.Copy(qos, claimQoS(d, in.defaults[d.GPU.UUID]))
		}
	}
	return accounting.Caps(devs), qos
}

// account runs one accounting pass over every GPU with enforced caps, in
// the caller's goroutine (tests; the daemon's passes run in the
// accounting loop, acctloop.go).
func (a *Agent) account(ctx context.Context) {
	a.accountWith(ctx, a.accountInputs(), nil)
}

// accountWith runs one accounting pass: NVML's MPS clients of every GPU of
// in (only nil: a tick) or of the GPUs of only (a poll), billed to their
// virtual devices, and under enforce the clients that pushed a device over
// its cap or escape it terminated. It never sleeps: grace periods between
// terminate_client, SIGTERM and SIGKILL are checked on later passes. It
// returns what NVML listed, by GPU (a GPU it could not list left out).
func (a *Agent) accountWith(ctx context.Context, in acctInputs, only []gpu.UUID) map[gpu.UUID][]gpu.Process {
	if in.policy == config.AccountingOff {
		a.acct.Tick(ctx, in.policy, nil, nil, nil, nil)
		a.noteUsage(accounting.Report{Policy: in.policy}, nil)
		a.writeViewUsage(accounting.Report{Policy: in.policy})
		return nil
	}
	gpus := in.uuids
	if only != nil {
		gpus = only
	}
	procs := a.sample(ctx, gpus)
	a.accountSampled(ctx, in, only, procs)
	return procs
}

// sample is NVML's MPS clients of gpus (a GPU that cannot be listed left
// out, and said).
func (a *Agent) sample(ctx context.Context, gpus []gpu.UUID) map[gpu.UUID][]gpu.Process {
	procs, err := accounting.Sample(ctx, a.opts.Backend, gpus)
	if err != nil {
		a.log.Warn("listing MPS clients; those GPUs go unmeasured this pass", "err", err)
	}
	return procs
}

// accountSampled is accountWith's pass over what was sampled.
func (a *Agent) accountSampled(ctx context.Context, in acctInputs, only []gpu.UUID, procs map[gpu.UUID][]gpu.Process) {
	a.acct.SetIdentityRequired(in.identityRequired)
	a.acct.SetServerMemoryLimits(in.serverMemory)
	a.acct.SetViewLibrary(in.viewLibrary)
	caps, qos := in.scope()
	var r accounting.Report
	var sampled map[gpu.UUID]bool
	if only == nil {
		r = a.acct.Tick(ctx, in.policy, procs, caps, qos, in.terms)
	} else {
		r = a.acct.Poll(ctx, in.policy, procs, caps, qos, in.terms)
		sampled = map[gpu.UUID]bool{}
		for _, g := range only {
			sampled[g] = true
		}
	}
	a.noteUsage(r, sampled)
	a.met.observeAccounting(r)
	a.writeViewUsage(r)
}

// checkConnected checks clients as they connected (the lines of the
// control.log at path), by the accounting's rules, and records what it
// found and did.
func (a *Agent) checkConnected(ctx context.Context, in acctInputs, path string, lines []mps.NewClient) {
	gpus := in.logs[path]
	if len(gpus) == 0 || in.policy == config.AccountingOff {
		return // a log no longer followed, or accounting off
	}
	ncs := make([]accounting.NewClient, len(lines))
	for i, l := range lines {
		ncs[i] = accounting.NewClient{PID: l.PID, GPUs: gpus, At: l.At}
	}
	a.acct.SetIdentityRequired(in.identityRequired)
	a.acct.SetServerMemoryLimits(in.serverMemory)
	caps, qos := in.scope()
	r := a.acct.Connected(ctx, in.policy, ncs, caps, qos, in.terms)
	a.noteConnected(r)
	a.met.observeAccounting(r.Report)
}

// serverMemoryLimits is, for each GPU of uuids, the pinned memory limit a
// container of ours is held to without a limit of its own: its control
// daemon's default for the container's ordinal 0, which is its GPU's own
// in the per-GPU layout and, in the single layout, ordinal 0's, the
// largest of the daemon's (plan.SharedMemoryLimits).
func (a *Agent) serverMemoryLimits(uuids []gpu.UUID) map[gpu.UUID]units.MiB {
	out := map[gpu.UUID]units.MiB{}
	var largest units.MiB
	for _, u := range uuids {
		out[u] = a.gpus[u].limits.MemoryLimit
		largest = max(largest, out[u])
	}
	if a.config().single() {
		for _, u := range uuids {
			out[u] = largest
		}
	}
	return out
}

// setDevices records the host's virtual devices as the last sync left
// them in the inventory, in its order, keeping the last accounting figures
// of devices that remain. A device gone from the inventory is gone from
// the status (and from /metrics).
func (a *Agent) setDevices(order []vdev.Name) {
	a.mu.Lock()
	defer a.mu.Unlock()
	prev := map[string]status.Device{}
	for _, d := range a.status.Devices {
		prev[d.Name] = d
	}
	devs := make([]status.Device, 0, len(order))
	for _, name := range order {
		l, ok := a.listed[name]
		if !ok {
			continue
		}
		dev := l.Device
		gi := -1 // a GPU out of the plan
		if _, ok := a.planned[dev.GPU.UUID]; ok {
			gi = dev.GPU.Index
		}
		d := status.Device{
			Name: name.String(), ID: l.ID, Addr: dev.Addr(), GPU: dev.GPU.UUID.String(), GPUIndex: gi,
			MemoryLimit: dev.MemoryLimit.Bytes(), ThreadPercentage: dev.ThreadPercentage,
			Guest: l.Holder, Healthy: l.Healthy, PendingRemoval: l.PendingRemoval, CDIName: l.CDIName,
		}
		if l.ClassKnown {
			d.QoSClass, d.ClientPriority = string(dev.Class), dev.Class.ClientPriority()
		}
		if p, ok := prev[d.Name]; ok {
			d.UsedBytes, d.Clients, d.Measured, d.OverCap, d.LastStep = p.UsedBytes, p.Clients, p.Measured, p.OverCap, p.LastStep
			d.WithoutView = p.WithoutView
		}
		devs = append(devs, d)
	}
	a.status.Devices = devs
}

// setClaims records the claims' own devices as the backend last answered
// (a.claims), healthy as their GPU is in gpus, keeping the last accounting
// figures of those that remain.
func (a *Agent) setClaims(gpus []status.GPU) {
	healthy := map[string]bool{}
	for _, g := range gpus {
		healthy[g.UUID] = g.Healthy
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	prev := map[string]status.Claim{}
	for _, c := range a.status.Claims {
		prev[c.Name] = c
	}
	var claims []status.Claim
	for _, h := range a.claims {
		d := h.Device
		gi := -1
		if _, ok := a.planned[d.GPU.UUID]; ok {
			gi = a.present[d.GPU.UUID].Index
		}
		c := status.Claim{Claim: h.Claim, UID: h.UID, Device: status.Device{
			Name: d.Name().String(), GPU: d.GPU.UUID.String(), GPUIndex: gi, MemoryLimit: d.MemoryLimit.Bytes(),
			ThreadPercentage: d.ThreadPercentage, ClientPriority: d.Class.ClientPriority(), Healthy: healthy[d.GPU.UUID.String()], CDIName: h.CDIName,
		}}
		if p, ok := prev[c.Name]; ok {
			c.UsedBytes, c.Clients, c.Measured, c.OverCap, c.LastStep, c.Escapes = p.UsedBytes, p.Clients, p.Measured, p.OverCap, p.LastStep, p.Escapes
		}
		claims = append(claims, c)
	}
	a.status.Claims = claims
}
