package agent

import (
	"context"
	"slices"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/acctloop"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// newAccounting is the accounting's station over acct: its steps under the
// loop's deadline with a heartbeat of their own (acctBeat), its metrics
// the agent's.
func (a *Agent) newAccounting(acct *accounting.Accountant) *acctloop.Loop {
	return acctloop.New(acctloop.Options{
		Accountant: acct, GPUs: a.opts.Backend, Views: a.views, Metrics: a.met.daemon,
		Step: func(ctx context.Context, name string, f func(context.Context)) {
			a.acctBeat.enter(name)
			defer a.acctBeat.leave()
			ctx, cancel := context.WithTimeout(ctx, stepBudget(a.config().Host))
			defer cancel()
			f(ctx)
		},
		PollInterval: a.opts.ClientPollInterval, Log: a.log,
	})
}

// accountInputs is the snapshot of the reconcile's state the accounting
// works from (acctloop.Inputs). It runs in the main loop.
func (a *Agent) accountInputs() acctloop.Inputs {
	cfg := a.config()
	in := acctloop.Inputs{Policy: cfg.Host.Accounting, Defaults: map[gpu.UUID]vdev.ServerDefaults{},
		Terms: map[gpu.UUID]accounting.Terminator{}, Logs: map[string][]gpu.UUID{}, IdentityRequired: !cfg.single(),
		ViewGiven: a.viewGiven.On(), ViewConfigured: cfg.Host.ViewLibrary != ""}
	for uuid := range a.planned {
		if gs := a.gpus[uuid]; gs != nil && gs.enforced {
			in.GPUs = append(in.GPUs, uuid)
			in.Terms[uuid] = gs.ctl
			in.Defaults[uuid] = serverDefaultsHeld(gs)
			log := mps.ControlLog(gs.env)
			in.Logs[log] = append(in.Logs[log], uuid)
		}
	}
	slices.Sort(in.GPUs)
	for _, uuid := range in.GPUs {
		in.Devices = append(in.Devices, a.planned[uuid]...)
	}
	for _, g := range in.Logs {
		slices.Sort(g)
	}
	in.ServerMemory = a.serverMemoryLimits(in.GPUs)
	for _, h := range a.claims {
		in.Claims = append(in.Claims, h.Device)
	}
	return in
}

// account runs one accounting pass over every GPU with enforced caps, in
// the caller's goroutine (tests; the daemon's passes run in the
// accounting loop).
func (a *Agent) account(ctx context.Context) { a.acct.Pass(ctx, a.accountInputs()) }

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
// them in the inventory, in its order; the accounting keeps the figures
// of those that remain (a device gone from the inventory is gone from the
// status, and from /metrics).
func (a *Agent) setDevices(order []vdev.Name) {
	a.mu.Lock()
	defer a.mu.Unlock()
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
		devs = append(devs, d)
	}
	a.status.Devices = devs
}

// setClaims records the claims' own devices as the backend last answered
// (a.claims), healthy as their GPU is in gpus; the accounting keeps the
// figures of those that remain.
func (a *Agent) setClaims(gpus []status.GPU) {
	healthy := map[string]bool{}
	for _, g := range gpus {
		healthy[g.UUID] = g.Healthy
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var claims []status.Claim
	for _, h := range a.claims {
		d := h.Device
		gi := -1
		if _, ok := a.planned[d.GPU.UUID]; ok {
			gi = a.present[d.GPU.UUID].Index
		}
		claims = append(claims, status.Claim{Claim: h.Claim, UID: h.UID, Device: status.Device{
			Name: d.Name().String(), GPU: d.GPU.UUID.String(), GPUIndex: gi, MemoryLimit: d.MemoryLimit.Bytes(),
			ThreadPercentage: d.ThreadPercentage, ClientPriority: d.Class.ClientPriority(), Healthy: healthy[d.GPU.UUID.String()], CDIName: h.CDIName,
		}})
	}
	a.status.Claims = claims
}

// keepFigures has the accounting keep the figures of the devices and
// claims listed before and after a sync (prev, the status's lists then).
func (a *Agent) keepFigures(prevDevs []status.Device, prevClaims []status.Claim) {
	before := map[string]bool{}
	for _, d := range prevDevs {
		before[d.Name] = true
	}
	for _, c := range prevClaims {
		before[c.Name] = true
	}
	keep := map[string]bool{}
	a.mu.Lock()
	for _, d := range a.status.Devices {
		keep[d.Name] = before[d.Name]
	}
	for _, c := range a.status.Claims {
		keep[c.Name] = before[c.Name]
	}
	a.mu.Unlock()
	a.acct.Keep(keep)
}
