package claim

import (
	"fmt"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// Sync makes the claims' spec, kind's file in the host's CDI directory,
// hold exactly devs, each device's identity file made first so that a
// runtime never meets an entry mounting a file that is not there; with no
// device the file is removed (CDI has no valid spec without one). Each
// device gets its entry <GPU UUID>::<index> and, when it has an ID (the
// claim's share), a second one named by it. w remembers the last spec
// (cdi.Writer): not safe for concurrent use. On any error the file is
// left as it was.
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
	path, changed, err = w.Sync(o, devs)
	if err != nil {
		return "", false, fmt.Errorf("the claims' CDI spec: %w", err)
	}
	return path, changed, nil
}
