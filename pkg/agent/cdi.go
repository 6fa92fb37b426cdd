package agent

import (
	"fmt"
	"path/filepath"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/identity"
	"yunion.io/x/mps-daemon/pkg/plan"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

func (a *Agent) cdiOptions(cfg *Config) cdi.Options {
	return cdi.Options{Dir: cfg.Host.CDIDirectory, ShmPath: cfg.Host.CDIShmPath, DevRoot: a.opts.DevRoot, View: a.viewOpts}
}

// CDIName is the name a container runtime is given for a virtual device.
func CDIName(name vdev.Name) string {
	return cdi.QualifiedName(cdi.DefaultKind, name.String())
}

// writeCDI makes the host's CDI spec hold every device that may be handed
// out (GPUs with enforced caps and no fault) and every device a guest still
// holds (pending removal too, so its container can restart), under both
// names: <GPU UUID>::<i> and, once the inventory has given one, the id.
// Ids and held devices come from the last sync's rows (a.listed): while
// the inventory is away they are the last ones seen, as dropping them would
// break containers started by id. An invalid spec is never written; the old
// one stays.
func (a *Agent) writeCDI(cfg *Config, p *plan.Plan, statuses []status.GPU) {
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
		if _, present := a.present[l.Device.GPU.UUID]; !present || l.Guest == "" || seen[name] {
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
	path, changed, err := a.syncCDI(cfg, devs)
	st.Path = path
	if err != nil {
		st.Error = err.Error()
		a.log.Error("CDI spec not written; the previous one stays", "err", err)
	} else {
		a.classes = classes
	}
	if err == nil && changed {
		a.log.Info("CDI spec written", "path", path, "devices", len(devs))
	}
	a.mu.Lock()
	a.status.CDI = &st
	a.mu.Unlock()
}

// identityStore holds the files that name each virtual device inside its
// containers (<state directory>/identity).
func identityStore(cfg *Config) identity.Store {
	return identity.Store{Dir: filepath.Join(cfg.Host.StateDirectory, "identity")}
}

// startIdentities makes the identity files of every planned device in the
// background, until the first time that succeeds in this process (a
// start), and returns what waits for it. They depend on the plan alone, so
// a start makes its files (one synced file each) while MPS is prepared,
// instead of after it in syncCDI, which then finds them made. syncCDI
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

// syncCDI writes the spec once every device's identity file exists, so a
// runtime never meets a spec that mounts a file that is not there; when a
// file cannot be made, the previous spec stays. Each device's view is made
// before the spec mounts it (syncViews); without it the spec goes without
// the view.
func (a *Agent) syncCDI(cfg *Config, devs []cdi.Device) (string, bool, error) {
	store := identityStore(cfg)
	names := make([]vdev.Name, len(devs))
	for i := range devs {
		names[i] = devs[i].Name()
		p, err := store.Path(names[i])
		if err != nil {
			return "", false, err
		}
		devs[i].IdentityFile = p
	}
	if err := store.Ensure(names); err != nil {
		return "", false, fmt.Errorf("identity files: %w", err)
	}
	o := a.cdiOptions(cfg)
	o.View = a.syncViews(cfg, devs)
	return a.spec.Sync(o, devs)
}
