package claim

import (
	"fmt"
	"log/slog"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/identity"
	"yunion.io/x/mps-daemon/pkg/vdev"
	"yunion.io/x/mps-daemon/pkg/view"
)

// Spec is where claims' CDI entries, identity files and views go: the
// host's CDI options (Kind is set by the caller: DefaultKind; View on when
// the host gives containers the view), identity store and view Writer.
type Spec struct {
	CDI      cdi.Options
	Identity identity.Store
	// View keeps the claims' views (shared with the agent's own devices);
	// nil, or CDI.View off: claims get no view.
	View *view.Writer
	// Log says when the claims' entries go without the view; nil: nothing.
	Log *slog.Logger
}

// IsClaimName reports whether a device name is a claim's (index
// IndexBase and above): the views Sync owns.
func IsClaimName(n vdev.Name) bool {
	_, i, err := vdev.ParseName(string(n))
	if err != nil {
		return false
	}
	_, ok := IsClaim(i)
	return ok
}

// Sync makes the claims' spec, kind's file in the host's CDI directory,
// hold exactly devs, each device's identity file made first so that a
// runtime never meets an entry mounting a file that is not there, and,
// with the view on, its view (the claim's size as its GPU's memory); the
// views of claims no longer here go once no container holds them. With
// no device the file is removed (CDI has no valid spec without one). Each
// device gets its entry <GPU UUID>::<index> and, when it has an ID (the
// claim's share), a second one named by it. w remembers the last spec
// (cdi.Writer): not safe for concurrent use. On any error the file is
// left as it was; views that cannot be made leave the entries without the
// view (their containers see the whole GPU, the caps hold as ever), and
// say so in the log.
func (s Spec) Sync(w *cdi.Writer, kind string, devs []cdi.Device) (path string, changed bool, err error) {
	o := s.CDI
	o.Kind = kind
	names := make([]vdev.Name, len(devs))
	for i := range devs {
		names[i] = devs[i].Name()
		p, err := s.Identity.Path(names[i])
		if err != nil {
			return "", false, err
		}
		devs[i].IdentityFile = p
	}
	if len(names) > 0 {
		if err := s.Identity.Ensure(names); err != nil {
			return "", false, fmt.Errorf("identity files of claims: %w", err)
		}
	}
	if !s.views(&o, devs) {
		o.View = cdi.View{}
	}
	path, changed, err = w.Sync(o, devs)
	if err != nil {
		return "", false, fmt.Errorf("the claims' CDI spec: %w", err)
	}
	return path, changed, nil
}

// views makes the views of devs, each device's directory set in it, and
// reports whether their entries may mount them.
func (s Spec) views(o *cdi.Options, devs []cdi.Device) bool {
	if !o.View.On() || s.View == nil {
		return false
	}
	vs := make([]view.Device, len(devs))
	for i, d := range devs {
		vs[i] = view.Device{Name: d.Name(), Cap: d.MemoryLimit}
	}
	pruned, err := s.View.Sync(IsClaimName, vs)
	if pruned.Err != nil && s.Log != nil {
		s.Log.Warn("views of claims no longer prepared kept", "err", pruned.Err)
	}
	if err != nil {
		if s.Log != nil {
			s.Log.Error("claims' views not written; their containers see the whole GPU (caps hold as ever)", "err", err)
		}
		return false
	}
	for i := range devs {
		p, err := s.View.Store().Path(devs[i].Name())
		if err != nil {
			return false
		}
		devs[i].ViewDir = p
	}
	return true
}
