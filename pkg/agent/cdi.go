package agent

import (
	"context"
	"log/slog"
	"sync"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/entries"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// entriesStation writes the entries of the agent's devices: each one's
// identity file, with the view on its view, and its CDI entry, in that
// order (pkg/entries, the step the claims' entries take too); it chooses
// once a reconcile whether containers get the view (view.go), for the
// agent's devices and the claims alike. Its part of /status is the CDI
// spec's and the view's. Loop-owned but for that part.
type entriesStation struct {
	opts *Options // the agent's: its /dev root
	log  *slog.Logger
	// host is where the host's entries go: its identity files and views
	// (the CDI options are each reconcile's).
	host entries.Spec
	// spec writes the CDI spec, encoding it again only when what it is
	// built from changed (cdi.Writer).
	spec cdi.Writer
	// classes are the QoS class each device's entry last carried, for a
	// device that leaves the plan while held.
	classes map[vdev.Name]vdev.Class
	// identitiesMade: a reconcile of this process has made every planned
	// device's identity file ahead of the spec (ahead).
	identitiesMade bool
	// viewGiven is what the last write gave containers of the view;
	// viewNoted the view's state last logged, viewPruneErr the last
	// failure to remove views of gone devices.
	viewGiven    cdi.View
	viewNoted    string
	viewPruneErr string

	mu   sync.Mutex
	cdi  *status.CDI
	view *status.View
}

// status fills the station's part of /status.
func (e *entriesStation) status(st *status.Status) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st.CDI, st.View = e.cdi, e.view
}

// specOf is where the host's entries go in cfg's CDI directory, the view
// v given to containers.
func (e *entriesStation) specOf(cfg *Config, v cdi.View) entries.Spec {
	s := e.host
	s.CDI = cdi.Options{Dir: cfg.Host.CDIDirectory, ShmPath: cfg.Host.CDIShmPath, DevRoot: e.opts.DevRoot, View: v}
	return s
}

// write chooses the view, once a reconcile (chooseView), and makes the
// host's CDI spec hold every device that may be handed out (GPUs with
// enforced caps and no fault) and every device a holder keeps (pending
// removal too, so its container can restart), under both names:
// <GPU UUID>::<i> and, once the backend has given one, the id, each with
// its identity file and, with the view on, its view, made first. Ids and
// held devices come from the last sync (r.listed): while the inventory is
// away they are the last ones seen, as dropping them would break
// containers started by id. An invalid spec is never written; the old one
// stays. The spec comes before the backend: a device must be startable by
// its <GPU UUID>::<i> name before anyone can be given it.
func (e *entriesStation) write(_ context.Context, r *round) error {
	if r.identities != nil {
		r.identities()
		r.identities = nil
	}
	if !r.viewChosen {
		r.view, r.viewChosen = e.chooseView(r.cfg), true
		r.claimSpec = e.specOf(r.cfg, r.view.View)
	}
	var devs []cdi.Device
	seen := map[vdev.Name]bool{}
	classes := map[vdev.Name]vdev.Class{}
	for i, gp := range r.plan.GPUs {
		if !r.gpus[i].Healthy {
			continue
		}
		pipe := r.cfg.pipeLog(gp.GPU.UUID).PipeDir
		for _, d := range gp.Devices {
			seen[d.Name()] = true
			classes[d.Name()] = d.Class
			devs = append(devs, cdi.FromVirtual(d, r.listed[d.Name()].ID, pipe))
		}
	}
	for name, l := range r.listed {
		if _, present := r.present[l.Device.GPU.UUID]; !present || l.Holder == "" || seen[name] {
			continue
		}
		if l.ClassKnown {
			classes[name] = l.Device.Class
		}
		d := cdi.FromVirtual(l.Device, l.ID, r.cfg.pipeLog(l.Device.GPU.UUID).PipeDir)
		d.ClientPriority = heldDevicePriority(l, r.priorities)
		devs = append(devs, d)
	}
	st := status.CDI{Devices: len(devs)}
	res, err := e.specOf(r.cfg, r.view.View).SyncDevices(&e.spec, devs)
	if r.view.On() {
		e.notePruned(res)
	}
	st.Path = res.Path
	if err != nil {
		st.Error = err.Error()
		e.log.Error("CDI spec not written; the previous one stays", "err", err)
	} else {
		e.classes = classes
		e.noteView(r.view, res)
	}
	if err == nil && res.Changed {
		e.log.Info("CDI spec written", "path", res.Path, "devices", len(devs))
	}
	r.classes = e.classes
	e.mu.Lock()
	e.cdi = &st
	e.mu.Unlock()
	return nil
}

// rewrite writes the spec once more when the sync created devices (they
// have their ids now) or keeps one out of the plan: a device held out of
// the plan keeps its entry even when it was attached (or its DRA claim
// prepared) after the previous sync, which the first write went by.
func (e *entriesStation) rewrite(ctx context.Context, r *round) error {
	if r.answer.Created > 0 || r.answer.HeldOutOfPlan > 0 {
		return e.write(ctx, r)
	}
	return nil
}

// heldDevicePriority is the client priority of a device a holder keeps
// past its plan: its class's, or, not known (the daemon restarted since),
// the default of its GPU's control daemon (priorities), which is what the
// device's clients get without the variable anyway.
func heldDevicePriority(l listed, priorities map[gpu.UUID]int) int {
	if l.ClassKnown {
		return l.Device.Class.ClientPriority()
	}
	if p, ok := priorities[l.Device.GPU.UUID]; ok {
		return p
	}
	return vdev.PriorityNormal
}

// ahead makes the identity files of every planned device in the
// background, until the first time that succeeds in this process (a
// start); write waits for it. They depend on the plan alone, so a start
// makes its files (one synced file each) while MPS is prepared, instead of
// after it in write, which then finds them made. write still ensures every
// file it names: a failure here is only logged, and the spec waits for its
// files as ever. A file made for a device of a GPU that then fails is
// harmless: files are never removed, and the GPU's devices need it once it
// heals.
func (e *entriesStation) ahead(_ context.Context, r *round) error {
	if e.identitiesMade {
		return nil
	}
	var names []vdev.Name
	for _, gp := range r.plan.GPUs {
		for _, d := range gp.Devices {
			names = append(names, d.Name())
		}
	}
	done := make(chan error, 1)
	go func() { done <- e.host.Identity.Ensure(names) }()
	r.identities = func() {
		if err := <-done; err != nil {
			e.log.Debug("identity files not made ahead of the CDI spec; it makes them", "err", err)
			return
		}
		e.identitiesMade = true
	}
	return nil
}
