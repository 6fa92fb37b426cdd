package agent

import (
	"context"
	"maps"
	"slices"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// account runs one accounting tick: NVML's MPS clients of every GPU with
// enforced caps, billed to their virtual devices, and under enforce the
// client that pushed a device over its cap terminated. It never sleeps:
// grace periods between terminate_client, SIGTERM and SIGKILL are checked
// on later ticks.
func (a *Agent) account(ctx context.Context) {
	policy := a.config().Host.Accounting
	if policy == config.AccountingOff {
		a.acct.Tick(ctx, policy, nil, nil, nil, nil)
		a.noteUsage(accounting.Report{Policy: policy})
		return
	}
	var devs []vdev.Device
	var uuids []gpu.UUID
	terms := map[gpu.UUID]accounting.Terminator{}
	qos := map[string]accounting.DeviceQoS{}
	for uuid := range a.planned {
		if gs := a.gpus[uuid]; gs != nil && gs.enforced {
			uuids = append(uuids, uuid)
			terms[uuid] = gs.ctl
			maps.Copy(qos, accounting.BatchQoS(a.planned[uuid], serverDefaultsHeld(gs)))
		}
	}
	slices.Sort(uuids)
	for _, uuid := range uuids {
		devs = append(devs, a.planned[uuid]...)
	}
	// Kubernetes claims' own devices on those GPUs (the backend's last
	// answer), each billed against its claim's size, and held to its
	// thread share (claimQoS).
	for _, h := range a.claims {
		d := h.Device
		if _, enforced := terms[d.GPU.UUID]; enforced {
			devs = append(devs, d)
			maps.Copy(qos, claimQoS(d, serverDefaultsHeld(a.gpus[d.GPU.UUID])))
		}
	}
	procs, err := accounting.Sample(ctx, a.opts.Backend, uuids)
	if err != nil {
		a.log.Warn("listing MPS clients; those GPUs go unmeasured this tick", "err", err)
	}
	// Only the per-GPU layout's pipe directories reach containers through
	// the CDI edits alone, which always carry the identity file.
	a.acct.SetIdentityRequired(!a.config().single())
	a.acct.SetServerMemoryLimits(a.serverMemoryLimits(uuids))
	r := a.acct.Tick(ctx, policy, procs, accounting.Caps(devs), qos, terms)
	a.noteUsage(r)
	a.met.observeAccounting(r)
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
			Guest: l.Guest, Healthy: l.Healthy, PendingRemoval: l.PendingRemoval, CDIName: l.CDIName,
		}
		if l.ClassKnown {
			d.QoSClass, d.ClientPriority = string(dev.Class), dev.Class.ClientPriority()
		}
		if p, ok := prev[d.Name]; ok {
			d.UsedBytes, d.Clients, d.Measured, d.OverCap, d.LastStep = p.UsedBytes, p.Clients, p.Measured, p.OverCap, p.LastStep
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

// noteUsage copies one accounting tick into the status: the policy, the
// unknown clients, and each device's use, clients, over-cap state and the
// last enforcement step on it. A device the tick did not measure (its GPU
// unreadable, accounting off) is marked so, not shown as unused.
func (a *Agent) noteUsage(r accounting.Report) {
	over := map[string]bool{}
	for _, o := range r.Decision.Over {
		over[o.Device] = true
	}
	last := map[string]string{}
	for _, s := range r.Steps {
		last[s.Device] = s.Step
	}
	st := status.Accounting{Policy: string(r.Policy)}
	if r.Usage.PerDevice != nil {
		st.Clients = map[string]int{accounting.SourceUnknown: len(r.Usage.Unknown)}
		for _, d := range r.Usage.PerDevice {
			for _, c := range d.Clients {
				st.Clients[c.Source]++
			}
		}
	}
	// The reported clients are the accounting's own values; what it keeps
	// besides (start times, Hidden) stays behind.
	for _, p := range r.Usage.Unknown {
		st.Unknown = append(st.Unknown, p.Unknown)
	}
	for _, m := range r.Usage.Mismatches {
		st.Mismatches = append(st.Mismatches, m.Mismatch)
	}
	for _, e := range r.Usage.Escapes {
		st.QoSEscapes = append(st.QoSEscapes, e.Escape)
	}
	escapes := map[string]int{}
	for _, e := range r.Usage.Escapes {
		escapes[e.Device]++
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.status.Accounting = &st
	measure := func(d *status.Device) {
		u, measured := r.Usage.PerDevice[d.Name]
		d.UsedBytes, d.Clients, d.Measured, d.OverCap = units.Bytes(u.UsedBytes), len(u.PIDs), measured, over[d.Name]
		if step, ok := last[d.Name]; ok {
			d.LastStep = step
		}
	}
	for i := range a.status.Devices {
		measure(&a.status.Devices[i])
	}
	for i := range a.status.Claims {
		c := &a.status.Claims[i]
		measure(&c.Device)
		c.Escapes = escapes[c.Name]
	}
}
