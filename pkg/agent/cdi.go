package agent

import (
	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/entries"
	"yunion.io/x/mps-daemon/pkg/identity"
	"yunion.io/x/mps-daemon/pkg/plan"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// entriesSpec is where the host's entries go (pkg/entries), the view v
// given to containers.
func (a *Agent) entriesSpec(cfg *Config, v cdi.View) entries.Spec {
	return entries.Spec{
		CDI:      cdi.Options{Dir: cfg.Host.CDIDirectory, ShmPath: cfg.Host.CDIShmPath, DevRoot: a.opts.DevRoot, View: v},
		Identity: identityStore(cfg), Views: a.views,
	}
}

// writeCDI makes the host's CDI spec hold every device that may be handed
// out (GPUs with enforced caps and no fault) and every device a guest still
// holds (pending removal too, so its container can restart), under both
// names: <GPU UUID>::<i> and, once the inventory has given one, the id,
// each with its identity file and, with the view v on, its view, made
// first (the entries step, pkg/entries). Ids and held devices come from
// the last sync (a.listed): while the inventory is away they are the last
// ones seen, as dropping them would break containers started by id. An
// invalid spec is never written; the old one stays.
func (a *Agent) writeCDI(cfg *Config, p *plan.Plan, statuses []status.GPU, v viewChoice) {
	var devs []cdi.Device
	seen := map[vdev.Name]bool{}
	classes := map[vdev.Name]vdev.Class{}
	for i, gp := range p.GPUs {
		if !statuses[i].Healthy {
			continue
		}
		pipe := cfg.pipeLog(gp.GPU.UUID).PipeDir
		for _, d := range gp.Devices {
			seen[d.Name()] = true
			classes[d.Name()] = d.Class
			devs = append(devs, cdi.FromVirtual(d, a.listed[d.Name()].ID, pipe))
		}
	}
	for name, l := range a.listed {
		if _, present := a.present[l.Device.GPU.UUID]; !present || l.Holder == "" || seen[name] {
			continue
		}
		if l.ClassKnown {
			classes[name] = l.Device.Class
		}
		d := cdi.FromVirtual(l.Device, l.ID, cfg.pipeLog(l.Device.GPU.UUID).PipeDir)
		d.ClientPriority = a.heldDevicePriority(l)
		devs = append(devs, d)
	}
	st := status.CDI{Devices: len(devs)}
	res, err := a.entriesSpec(cfg, v.View).Sync(&a.spec, func(n vdev.Name) bool { return !claim.IsClaimName(n) }, devs)
	if v.On() {
		a.notePruned(res.Pruned)
	}
	st.Path = res.Path
	if err != nil {
		st.Error = err.Error()
		a.log.Error("CDI spec not written; the previous one stays", "err", err)
	} else {
		a.classes = classes
		a.noteView(v, res)
	}
	if err == nil && res.Changed {
		a.log.Info("CDI spec written", "path", res.Path, "devices", len(devs))
	}
	a.mu.Lock()
	a.status.CDI = &st
	a.mu.Unlock()
}

// identityStore holds the files that name each virtual device inside its
// containers (<state directory>/identity).
func identityStore(cfg *Config) identity.Store { return entries.IdentityStore(cfg.Host.StateDirectory) }

// startIdentities makes the identity files of every planned device in the
// background, until the first time that succeeds in this process (a
// start), and returns what waits for it. They depend on the plan alone, so
// a start makes its files (one synced file each) while MPS is prepared,
// instead of after it in writeCDI, which then finds them made. writeCDI
// still ensures every file it names, as before: a failure here is only
// logged, and the spec waits for its files as ever. A file made for a
// device of a GPU that then fails is harmless: files are never removed,
// and the GPU's devices need it once it heals.
func (a *Agent) startIdentities(cfg *Config, p *plan.Plan) (wait func()) {
	if a.identitiesMade {
		return func() {}
	}
	var names []vdev.Name
	for _, gp := range p.GPUs {
		for _, d := range gp.Devices {
			names = append(names, d.Name())
		}
	}
	done := make(chan error, 1)
	go func() { done <- identityStore(cfg).Ensure(names) }()
	return func() {
		if err := <-done; err != nil {
			a.log.Debug("identity files not made ahead of the CDI spec; it makes them", "err", err)
			return
		}
		a.identitiesMade = true
	}
}
