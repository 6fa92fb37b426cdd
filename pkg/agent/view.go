package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
	"yunion.io/x/mps-daemon/pkg/view"
)

// viewStore holds the devices' views (<state directory>/view), beside
// their identity files.
func viewStore(cfg *Config) view.Store {
	return view.Store{Dir: filepath.Join(cfg.Host.StateDirectory, "view")}
}

// syncViews makes the view of each device the spec names (its directory,
// its file saying its cap) when mps_view_library is set and the library is
// there, sets each device's ViewDir, and returns the view the spec gives
// their containers; the zero cdi.View when they get none (off, the library
// missing, the views not written: the devices are served all the same, and
// their containers see the whole GPU). The views of devices gone from the
// spec go once no container holds them (the claims' are the driver's). It
// records the state in the status, logged when it changes.
func (a *Agent) syncViews(cfg *Config, devs []cdi.Device) cdi.View {
	lib := cfg.Host.ViewLibrary
	st := status.View{Library: lib, State: status.ViewOn}
	var opts cdi.View
	switch why := libraryProblem(lib); {
	case lib == "":
		st.State = status.ViewOff
	case why != "":
		st.State, st.Reason = status.ViewMissing, why
	default:
		vs := make([]view.Device, len(devs))
		for i, d := range devs {
			vs[i] = view.Device{Name: d.Name(), Cap: d.MemoryLimit}
		}
		pruned, err := a.views.Sync(func(n vdev.Name) bool { return !claim.IsClaimName(n) }, vs)
		a.notePruned(pruned)
		for i := range devs {
			if err == nil {
				devs[i].ViewDir, err = a.views.Store().Path(devs[i].Name())
			}
		}
		if err != nil {
			st.State, st.Reason = status.ViewFailed, err.Error()
			break
		}
		opts = cdi.View{Library: lib, Platforms: a.views.Store().PlatformsPath(), Preload: a.views.Store().PreloadPath()}
	}
	st.Devices = len(a.views.Views())
	a.viewOpts = opts
	a.noteView(st)
	return opts
}

// notePruned logs what became of the views of devices that are gone:
// each removal, and a failure to tell whether they are held (logged when
// it changes: the views stay until it can be told).
func (a *Agent) notePruned(p view.Pruned) {
	if p.Removed > 0 {
		a.log.Info("views of devices that are gone removed", "removed", p.Removed, "held", p.Held)
	}
	msg := ""
	if p.Err != nil {
		msg = p.Err.Error()
		if msg != a.viewPruneErr {
			a.log.Warn("views of devices that are gone kept", "err", p.Err)
		}
	}
	a.viewPruneErr = msg
}

// libraryProblem says why the view's library cannot be mounted, "" when it
// can (a regular file, through links: a bind mount follows them).
func libraryProblem(path string) string {
	if path == "" {
		return ""
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("%s does not exist (package yunion-mps-daemon installs it): containers see the whole GPU", path)
	case err != nil:
		return fmt.Sprintf("%v: containers see the whole GPU", err)
	case !fi.Mode().IsRegular():
		return fmt.Sprintf("%s is not a regular file (%s): containers see the whole GPU", path, fi.Mode().Type())
	}
	return ""
}

// viewPlan is what check-config says of the view: a missing library is
// not an error (the daemon serves the devices without the view), but the
// operator is told.
func viewPlan(lib string) string {
	switch why := libraryProblem(lib); {
	case lib == "":
		return "off (mps_view_library is empty): containers see the whole GPU's memory"
	case why != "":
		return "MISSING, the devices are served without it: " + why
	}
	return lib + ": containers see their device's cap as the GPU's memory"
}

// noteView puts the view's state in the status and logs it when it
// changes: a host without the library says so once, not every reconcile.
func (a *Agent) noteView(st status.View) {
	a.mu.Lock()
	a.status.View = &st
	a.mu.Unlock()
	key := st.State + "\x00" + st.Reason
	if key == a.viewNoted {
		return
	}
	a.viewNoted = key
	log := a.log.With("library", st.Library)
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

// writeViewUsage puts each device's use, as this accounting pass measured
// it, in its view (a file replaced only where the figure changed); with
// accounting off, 0. A device not measured keeps its last figure.
func (a *Agent) writeViewUsage(r accounting.Report) {
	if a.config().Host.ViewLibrary == "" {
		return
	}
	used := map[vdev.Name]units.Bytes{}
	if r.Usage.PerDevice == nil {
		for n := range a.views.Views() {
			used[n] = 0
		}
	}
	for name, d := range r.Usage.PerDevice {
		used[vdev.Name(name)] = units.Bytes(d.UsedBytes)
	}
	msg := ""
	if err := a.views.SetUsed(used); err != nil {
		msg = err.Error()
		if msg != a.viewUsedErr {
			a.log.Warn("writing the devices' use into their views", "err", err)
		}
	}
	a.viewUsedErr = msg
}
