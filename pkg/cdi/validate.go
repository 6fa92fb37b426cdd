package cdi

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/google/uuid"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

var (
	// ErrInvalid marks every state that must not become a spec; nothing is
	// written when it is returned.
	ErrInvalid = errors.New("invalid CDI spec")
	// ErrNoDevices is Build's answer to an empty device list: CDI has no
	// valid spec without devices, the file should go (Remove, or Sync).
	ErrNoDevices = errors.New("no virtual devices")
)

// maxSocketPath is the longest unix socket path the kernel takes (sun_path
// is 108 bytes with the terminating NUL); MPS clients connect to
// <pipe dir>/control and the daemon listens on the longer control_privileged.
const maxSocketPath = 107

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// splitKind checks "vendor/class" with the CDI library's name rules.
func splitKind(kind string) (vendor, class string, err error) {
	vendor, class = parser.ParseQualifier(kind)
	if vendor == "" {
		return "", "", invalidf("kind %q: want vendor/class", kind)
	}
	if err := parser.ValidateVendorName(vendor); err != nil {
		return "", "", invalidf("kind %q: %w", kind, err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return "", "", invalidf("kind %q: %w", kind, err)
	}
	return vendor, class, nil
}

// absClean requires an absolute, clean path: what a bind mount source must be
// and what the daemon's config produces.
func absClean(what, p string) error {
	switch {
	case p == "":
		return invalidf("%s is empty", what)
	case !filepath.IsAbs(p) || filepath.Clean(p) != p:
		return invalidf("%s %q is not an absolute clean path", what, p)
	}
	return nil
}

func (o Options) validate() error {
	var errs []error
	if _, _, err := splitKind(o.Kind); err != nil {
		errs = append(errs, err)
	}
	if o.ShmPath != NoShm {
		errs = append(errs, absClean("shm path", o.ShmPath))
	}
	errs = append(errs, absClean("CDI directory", o.Dir), absClean("dev root", o.DevRoot))
	if o.View.On() {
		errs = append(errs, absClean("view library", o.View.Library), absClean("preload list", o.View.Preload))
	} else if o.View.Preload != "" {
		errs = append(errs, invalidf("preload list %q without a view library", o.View.Preload))
	}
	return errors.Join(errs...)
}

// validGPUUUID accepts NVML's "GPU-" + RFC 4122 text form, any case.
func validGPUUUID(s gpu.UUID) error {
	rest, ok := strings.CutPrefix(string(s), "GPU-")
	if !ok || len(rest) != 36 {
		return invalidf("GPU UUID %q: want GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", s)
	}
	if _, err := uuid.Parse(rest); err != nil {
		return invalidf("GPU UUID %q: %w", s, err)
	}
	return nil
}

// validateDevices refuses inputs a container could not use or that would
// hand out the wrong GPU or caps. Every problem is reported, joined.
func validateDevices(o settled, devs []Device) error {
	var errs []error
	names := map[string]int{}
	type gpuFacts struct {
		minor   int
		pipeDir string
	}
	gpus := map[gpu.UUID]gpuFacts{}
	minors := map[int]gpu.UUID{}
	identities := map[string]int{}
	views := map[string]int{}
	for i, d := range devs {
		at := fmt.Sprintf("device %d (%s)", i, d.Name())
		bad := func(err error) { errs = append(errs, fmt.Errorf("%s: %w", at, err)) }
		if err := validGPUUUID(d.GPU.UUID); err != nil {
			bad(err)
		}
		if d.Index < 0 {
			bad(invalidf("slice index %d is negative", d.Index))
		}
		if d.ID != "" {
			if _, err := uuid.Parse(d.ID); err != nil || len(d.ID) != 36 {
				bad(invalidf("inventory id %q is not a UUID", d.ID))
			}
		}
		if d.GPU.Minor < 0 {
			bad(invalidf("device minor %d is negative", d.GPU.Minor))
		}
		if err := absClean("pipe directory", d.PipeDir); err != nil {
			bad(err)
		} else if n := len(d.PipeDir) + len("/control_privileged"); n > maxSocketPath {
			bad(invalidf("pipe directory %q: its sockets' paths would be %d bytes, over the kernel's %d", d.PipeDir, n, maxSocketPath))
		}
		if err := absClean("identity file", d.IdentityFile); err != nil {
			bad(err)
		} else if j, dup := identities[d.IdentityFile]; dup {
			bad(invalidf("identity file %q is also device %d's", d.IdentityFile, j))
		}
		identities[d.IdentityFile] = i
		if o.View.On() {
			if err := absClean("view directory", d.ViewDir); err != nil {
				bad(err)
			} else if j, dup := views[d.ViewDir]; dup {
				bad(invalidf("view directory %q is also device %d's", d.ViewDir, j))
			}
			views[d.ViewDir] = i
		}
		if d.MemoryLimit <= 0 {
			bad(invalidf("memory limit %v: want > 0", d.MemoryLimit))
		}
		if d.ThreadPercentage <= 0 || d.ThreadPercentage > 100 {
			bad(invalidf("thread percentage %d: want 1..100", d.ThreadPercentage))
		}
		if d.ClientPriority != vdev.PriorityNormal && d.ClientPriority != vdev.PriorityBelowNormal {
			bad(invalidf("client priority %d: want %d or %d", d.ClientPriority, vdev.PriorityNormal, vdev.PriorityBelowNormal))
		}
		for _, n := range deviceNames(d) {
			if j, dup := names[n]; dup {
				bad(invalidf("name %q is also device %d's", n, j))
			}
			names[n] = i
		}
		if g, seen := gpus[d.GPU.UUID]; seen && (g.minor != d.GPU.Minor || g.pipeDir != d.PipeDir) {
			bad(invalidf("GPU %s has minor %d and pipe directory %q here, minor %d and %q elsewhere",
				d.GPU.UUID, d.GPU.Minor, d.PipeDir, g.minor, g.pipeDir))
		}
		gpus[d.GPU.UUID] = gpuFacts{d.GPU.Minor, d.PipeDir}
		if u, seen := minors[d.GPU.Minor]; seen && u != d.GPU.UUID {
			bad(invalidf("/dev/nvidia%d is also GPU %s's", d.GPU.Minor, u))
		}
		minors[d.GPU.Minor] = d.GPU.UUID
	}
	return errors.Join(errs...)
}

// deviceNames are the CDI names of d: "<GPU UUID>::<i>", and the inventory
// id once known.
func deviceNames(d Device) []string {
	if d.ID == "" {
		return []string{d.Name().String()}
	}
	return []string{d.Name().String(), d.ID}
}

// validateSpec runs the CDI library's checks that do not need a file: the
// version against the fields used, kind, device names, every edit, a device
// with none (the loader's "empty device edits"), and unique names: every
// check the loader of v1.1.1 makes of a parsed spec (its annotation check
// passes any map of strings). Write also loads the written bytes with cdiapi.ReadSpec, the library's full
// check, before they replace the old spec; a Writer, whose spec build made
// and this checked, does not (writer.go).
func validateSpec(s *specs.Spec) error {
	if s == nil {
		return invalidf("no spec")
	}
	if err := specs.ValidateVersion(s); err != nil {
		return invalidf("%w", err)
	}
	if _, _, err := splitKind(s.Kind); err != nil {
		return err
	}
	if err := (&cdiapi.ContainerEdits{ContainerEdits: &s.ContainerEdits}).Validate(); err != nil {
		return invalidf("spec edits: %w", err)
	}
	if len(s.Devices) == 0 {
		return invalidf("%w", ErrNoDevices)
	}
	seen := map[string]bool{}
	for i := range s.Devices {
		d := &s.Devices[i]
		if err := parser.ValidateDeviceName(d.Name); err != nil {
			return invalidf("device %q: %w", d.Name, err)
		}
		if seen[d.Name] {
			return invalidf("device %q appears twice", d.Name)
		}
		seen[d.Name] = true
		if noEdits(&d.ContainerEdits) {
			return invalidf("device %q: no container edits", d.Name)
		}
		edits := &cdiapi.ContainerEdits{ContainerEdits: &d.ContainerEdits}
		if err := edits.Validate(); err != nil {
			return invalidf("device %q: %w", d.Name, err)
		}
	}
	return nil
}

// noEdits is the CDI library's test for a device it refuses as having
// "empty device edits" (its ContainerEdits.isEmpty, unexported).
func noEdits(e *specs.ContainerEdits) bool {
	return len(e.Env) == 0 && len(e.DeviceNodes) == 0 && len(e.Hooks) == 0 && len(e.Mounts) == 0 &&
		len(e.AdditionalGIDs) == 0 && e.IntelRdt == nil && len(e.NetDevices) == 0
}
