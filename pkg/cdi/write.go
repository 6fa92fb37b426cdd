package cdi

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"yunion.io/x/mps-daemon/pkg/atomicfile"
	"yunion.io/x/mps-daemon/pkg/version"
)

// header heads the file, for whoever opens it on the host; it names the
// writer, which the spec itself cannot without annotations (cdiVersion 0.6.0).
func header() string {
	return "# CDI spec of this host's MPS virtual devices, written by mps-daemon " + version.Version + ".\n" +
		"# It is rewritten whenever the devices change: edits here do not last.\n" +
		"# See docs/containers.md of yunion.io/x/mps-daemon.\n"
}

// Write puts s in o.Dir as "vendor-class.yaml" (CDI's name for a vendor's
// spec) and reports whether the file changed.
//
// Atomic: the bytes go to a temporary file in the same directory (named
// ".<file>.*.tmp", which CDI runtimes do not read), are synced, loaded back
// with the CDI library's own loader, and only then renamed over the old
// file, and the directory synced. A runtime reading the directory sees the
// old spec or the new one, whole. A spec the library refuses is an error
// wrapping ErrInvalid and leaves the old file as it was. Bytes equal to the
// file's are not written at all, so runtimes watching the directory see no
// event when nothing changed.
func Write(opts Options, s *specs.Spec) (path string, changed bool, err error) {
	o := opts.settle()
	if err := o.validate(); err != nil {
		return "", false, err
	}
	if err := validateSpec(s); err != nil {
		return "", false, err
	}
	if s.Kind != o.Kind {
		return "", false, invalidf("spec of kind %q, but this host's kind is %q", s.Kind, o.Kind)
	}
	path, err = specPath(o)
	if err != nil {
		return "", false, err
	}
	data, err := encode(s)
	if err != nil {
		return "", false, err
	}
	changed, err = writeData(o, path, data, true)
	if err != nil {
		return "", false, err
	}
	return path, changed, nil
}

// writeData puts the encoded spec data at path (Write's file), unless the
// file holds those bytes already; load has the CDI library load the
// written temporary file before it replaces the old one.
func writeData(o settled, path string, data []byte, load bool) (changed bool, err error) {
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return false, fmt.Errorf("creating CDI directory: %w", err)
	}
	if err := removeStaleTemps(path); err != nil {
		return false, err
	}
	old, err := os.ReadFile(path)
	switch {
	case err == nil && bytes.Equal(old, data):
		return false, nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("reading the current CDI spec: %w", err)
	}
	if err := replace(path, data, load); err != nil {
		return false, err
	}
	return true, nil
}

// Remove deletes the spec file (when there are no virtual devices: CDI has
// no valid spec without one). It reports whether there was a file.
func Remove(o Options) (removed bool, err error) {
	s := o.settle()
	path, err := specPath(s)
	if err != nil {
		return false, err
	}
	return remove(s, path)
}

// remove is Remove of the file at path, o's spec.
func remove(o settled, path string) (removed bool, err error) {
	if err := removeStaleTemps(path); err != nil {
		return false, err
	}
	switch err := os.Remove(path); {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("removing CDI spec: %w", err)
	}
	return true, atomicfile.SyncDir(o.Dir)
}

// Sync makes the spec file match devs: Build then Write (without loading
// the file back: Writer), or Remove when devs is empty. On any error the
// file is left as it was. A caller that syncs again and again keeps a
// Writer instead, which encodes a spec only when its inputs changed.
func Sync(o Options, devs []Device) (path string, changed bool, err error) {
	var w Writer
	return w.Sync(o, devs)
}

// SpecPath is the file Write writes: CDI's "vendor-class.yaml" in o.Dir.
func SpecPath(o Options) (string, error) { return specPath(o.settle()) }

func specPath(o settled) (string, error) {
	vendor, class, err := splitKind(o.Kind)
	if err != nil {
		return "", err
	}
	return filepath.Join(o.Dir, cdiapi.GenerateSpecName(vendor, class)+".yaml"), nil
}

// replace writes data over path atomically (synced, renamed, the directory
// synced), with load once the CDI library has loaded the written temporary
// file; a spec it refuses leaves path as it was.
func replace(path string, data []byte, load bool) error {
	var check func(tmp string) error
	if load {
		check = func(tmp string) error {
			if _, err := cdiapi.ReadSpec(tmp, 0); err != nil {
				return invalidf("the CDI library refuses the new spec: %w", err)
			}
			return nil
		}
	}
	// Runtimes, rootless ones too, must read it; nothing in it is secret.
	return atomicfile.WriteChecked(path, data, 0o644, check)
}

// removeStaleTemps deletes temporary files a crash between create and rename
// left behind.
func removeStaleTemps(path string) error {
	stale, err := atomicfile.Stale(path)
	if err != nil {
		return fmt.Errorf("looking for stale temporary CDI specs: %w", err)
	}
	for _, f := range stale {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing stale temporary CDI spec: %w", err)
		}
	}
	return nil
}
