// Package entries is the one step that gives a set of virtual devices
// what their containers are handed on the host, in the order a runtime
// needs it: each device's identity file (pkg/identity), with the view on
// its view (pkg/view), then its CDI entry (pkg/cdi), which mounts both. A
// runtime therefore never meets an entry mounting a file that is not
// there. The agent's devices (fixed slices, a GPU shared by claims whole)
// and the claims' own devices (pkg/ledger) go through it alike, each set
// into a CDI spec file of its own kind and owning its own views.
//
// Whether containers get the view is decided once per reconcile, by the
// agent, for every set alike (Spec.CDI.View); a set whose views cannot be
// written goes without the view (its containers see the whole GPU, the
// caps hold as ever) and says why (Result.ViewErr).
package entries

import (
	"fmt"
	"path/filepath"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/identity"
	"yunion.io/x/mps-daemon/pkg/vdev"
	"yunion.io/x/mps-daemon/pkg/view"
)

// Spec is where a set of devices' entries go.
type Spec struct {
	// CDI are the host's CDI options: Kind names the set's spec file
	// (cdi.DefaultKind for the agent's devices); View is on when the
	// reconcile gives containers the view.
	CDI cdi.Options
	// Identity is the host's store of identity files.
	Identity identity.Store
	// Views keeps the host's views, one Writer shared by every set; nil:
	// no views.
	Views *view.Writer
}

// Result is what Sync did.
type Result struct {
	// Path is the spec file; Changed says whether Sync wrote or removed it.
	Path    string
	Changed bool
	// View is what the entries give their containers: Spec.CDI.View, or
	// the zero View when it is off or the views could not be written.
	View cdi.View
	// ViewErr says why the views could not be written (View then off).
	ViewErr error
	// Pruned is what became of the views of the set's devices that are
	// gone.
	Pruned view.Pruned
}

// SyncDevices is Sync of the agent's devices (fixed slices, GPUs shared by
// claims whole): the views of every name but a claim's are theirs.
func (s Spec) SyncDevices(w *cdi.Writer, devs []cdi.Device) (Result, error) {
	return s.sync(w, func(n vdev.Name) bool { return !claim.IsClaimName(n) }, devs)
}

// SyncClaims is Sync of the claims' own devices (pkg/claim): the views of
// claims' names are theirs.
func (s Spec) SyncClaims(w *cdi.Writer, devs []cdi.Device) (Result, error) {
	return s.sync(w, claim.IsClaimName, devs)
}

// sync makes the set's spec (w remembers its last one: cdi.Writer) hold
// exactly devs: each device's identity file made first, then, with the
// view on, its view (the device's cap as its GPU's memory), each
// device's IdentityFile and ViewDir set in devs; the views owns says are
// the set's and that devs no longer has go once no container holds them.
// With no device the spec file is removed (CDI has no valid spec without
// one). On an error the spec file is left as it was; an error writing it
// comes with what became of the views.
func (s Spec) sync(w *cdi.Writer, owns func(vdev.Name) bool, devs []cdi.Device) (Result, error) {
	names := make([]vdev.Name, len(devs))
	for i := range devs {
		names[i] = devs[i].Name()
		p, err := s.Identity.Path(names[i])
		if err != nil {
			return Result{}, err
		}
		devs[i].IdentityFile = p
	}
	if len(names) > 0 {
		if err := s.Identity.Ensure(names); err != nil {
			return Result{}, fmt.Errorf("identity files: %w", err)
		}
	}
	o := s.CDI
	var res Result
	if o.View.On() && s.Views != nil {
		res.Pruned, res.ViewErr = s.views(owns, devs)
	}
	if s.Views == nil || res.ViewErr != nil {
		o.View = cdi.View{}
	}
	res.View = o.View
	var err error
	res.Path, res.Changed, err = w.Sync(o, devs)
	return res, err
}

// Entry is dev as Sync hands it to the CDI spec: its identity file and,
// while containers get the view (s.CDI.View), its view directory set; for
// a runtime handed the entry without CDI (the NRI plugin, pkg/nri). It
// writes nothing: the files are the ones Sync made.
func (s Spec) Entry(dev cdi.Device) (cdi.Device, error) {
	var err error
	if dev.IdentityFile, err = s.Identity.Path(dev.Name()); err != nil {
		return dev, err
	}
	if s.CDI.View.On() && s.Views != nil {
		dev.ViewDir, err = s.Views.Store().Path(dev.Name())
	}
	return dev, err
}

// views makes the views of devs, each device's directory set in it.
func (s Spec) views(owns func(vdev.Name) bool, devs []cdi.Device) (view.Pruned, error) {
	vs := make([]view.Device, len(devs))
	for i, d := range devs {
		vs[i] = view.Device{Name: d.Name(), Cap: d.MemoryLimit}
	}
	pruned, err := s.Views.Sync(owns, vs)
	if err != nil {
		return pruned, err
	}
	for i := range devs {
		if devs[i].ViewDir, err = s.Views.Store().Path(devs[i].Name()); err != nil {
			return pruned, err
		}
	}
	return pruned, nil
}

// ForHost is where the host's entries go: its identity files and views
// under the state directory (procRoot is where the views' writer looks for
// the mount namespaces that hold them); the CDI options are the caller's.
func ForHost(stateDir, procRoot string) Spec {
	return Spec{Identity: IdentityStore(stateDir), Views: view.NewWriter(ViewStore(stateDir), procRoot)}
}

// IdentityStore holds the files that name each virtual device inside its
// containers: <state directory>/identity.
func IdentityStore(stateDir string) identity.Store {
	return identity.Store{Dir: filepath.Join(stateDir, "identity")}
}

// ViewStore holds the devices' views, beside their identity files:
// <state directory>/view.
func ViewStore(stateDir string) view.Store {
	return view.Store{Dir: filepath.Join(stateDir, "view")}
}

// ViewOf is the view containers get with library, the view's library
// found on the host: it, the host's platform directory the preload list
// names it through and the preload list (s.Views), mounted into each
// container.
func (s Spec) ViewOf(library string) cdi.View {
	st := s.Views.Store()
	return cdi.View{Library: library, Platforms: st.PlatformsPath(), Preload: st.PreloadPath()}
}
