package agent

import (
	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/entries"
	"yunion.io/x/mps-daemon/pkg/status"
)

// The view (pkg/view, docs/containers.md): whether containers are told
// their device's cap as the GPU's memory. The entries station chooses it
// once a reconcile, for its devices and the claims' alike, and says in
// /status what became of it.

// viewChoice is whether containers get the view this reconcile.
type viewChoice struct {
	// View is the view the entries give: on when mps_view_library is set
	// and the library is there.
	cdi.View
	// state is what the status says of it before the entries are written
	// (on, off, missing).
	state status.View
}

// chooseView decides whether containers get the view: mps_view_library set
// and the library there. Without it (off, the library missing) the devices
// are served all the same, and their containers see the whole GPU.
func (e *entriesStation) chooseView(cfg *Config) viewChoice {
	lib := cfg.Host.ViewLibrary
	c := viewChoice{state: status.View{Library: lib, State: status.ViewOn}}
	switch why := entries.LibraryProblem(lib); {
	case lib == "":
		c.state.State = status.ViewOff
	case why != "":
		c.state.State, c.state.Reason = status.ViewMissing, why
	default:
		c.View = e.host.ViewOf(lib)
	}
	return c
}

// notePruned logs what became of the views of devices that are gone
// (res.Pruned): each removal, and a failure to tell whether they are held
// (logged when it changes: the views stay until it can be told).
func (e *entriesStation) notePruned(res entries.Result) {
	p := res.Pruned
	if p.Removed > 0 {
		e.log.Info("views of devices that are gone removed", "removed", p.Removed, "held", p.Held)
	}
	msg := ""
	if p.Err != nil {
		msg = p.Err.Error()
		if msg != e.viewPruneErr {
			e.log.Warn("views of devices that are gone kept", "err", p.Err)
		}
	}
	e.viewPruneErr = msg
}

// noteView records what the entries gave containers of the view c chose
// (viewGiven: what the accounting checks clients for), puts its state in
// the status (failed when the views could not be written: the devices are
// served without it) and logs it when it changes: a host without the
// library says so once, not every reconcile.
func (e *entriesStation) noteView(c viewChoice, res entries.Result) {
	st := c.state
	if res.ViewErr != nil {
		st.State, st.Reason = status.ViewFailed, res.ViewErr.Error()
	}
	st.Devices = len(e.host.Views.Views())
	e.viewGiven = res.View
	e.mu.Lock()
	e.view = &st
	e.mu.Unlock()
	key := st.State + "\x00" + st.Reason
	if key == e.viewNoted {
		return
	}
	e.viewNoted = key
	log := e.log.With("library", st.Library)
	switch st.State {
	case status.ViewOn:
		log.Info("containers get their device's view: CUDA and NVML answer with the device's cap")
	case status.ViewOff:
		log.Info("the view is off (mps_view_library empty): containers see the whole GPU's memory; caps hold as ever")
	case status.ViewMissing:
		log.Warn("the view's library is missing: devices are served without the view; caps hold as ever", "reason", st.Reason)
	default:
		log.Error("views not written: devices are served without the view until they are; caps hold as ever", "err", st.Reason)
	}
}
