package entries

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/identity"
	"yunion.io/x/mps-daemon/pkg/vdev"
	"yunion.io/x/mps-daemon/pkg/view"
)

// The entries step over a set of claims' own devices (pkg/claim), the
// set the agent's devices are not: the claims' spec under its own kind,
// the views of claims' names alone.

const uuid = gpu.UUID("GPU-81df1fb7-5946-da34-7f70-c730b0456642")

func base(pipe string) cdi.Device {
	return cdi.FromVirtual(vdev.Device{GPU: gpu.Info{UUID: uuid, Minor: 3}, MemoryLimit: 81559, ThreadPercentage: 60}, "", pipe)
}

// claims is the claims' Sync of devs: their spec, their views.
func (s Spec) claims(w *cdi.Writer, devs []cdi.Device) (path string, changed bool, err error) {
	s.CDI.Kind = claim.DefaultKind
	res, err := s.SyncClaims(w, devs)
	return res.Path, res.Changed, err
}

// Sync makes each claim's identity file before the spec names it, writes
// the claims' spec under its own kind, and removes it when no claim is
// left.
func TestClaimsEntries(t *testing.T) {
	dir, err := os.MkdirTemp("", "claim")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := Spec{CDI: cdi.Options{Dir: filepath.Join(dir, "cdi"), DevRoot: filepath.Join(dir, "dev")}, Identity: identity.Store{Dir: filepath.Join(dir, "id")}}
	d, err := claim.NewDevice(base(filepath.Join(dir, "pipe")), 0, 1024, 0)
	if err != nil {
		t.Fatal(err)
	}
	var w cdi.Writer
	path, changed, err := s.claims(&w, []cdi.Device{d})
	if err != nil || !changed || filepath.Base(path) != "yunion.io-mps-claim.yaml" {
		t.Fatalf("Sync: %s %v %v", path, changed, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	name := vdev.NameOf(uuid, claim.IndexBase).String()
	for _, want := range []string{"kind: " + claim.DefaultKind, "name: " + name, cdi.EnvMemoryLimit + "=0=1024M", cdi.EnvThreadPercentage + "=60"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the spec lacks %q:\n%s", want, b)
		}
	}
	idf, _ := s.Identity.Path(vdev.Name(name))
	if got, err := os.ReadFile(idf); err != nil || string(got) != name+"\n" {
		t.Errorf("identity file %s: %q %v", idf, got, err)
	}
	if _, changed, err := s.claims(&w, []cdi.Device{d}); err != nil || changed {
		t.Errorf("the same claims again: changed %v, %v", changed, err)
	}
	if _, changed, err := s.claims(&w, nil); err != nil || !changed {
		t.Errorf("no claims: changed %v, %v", changed, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the spec outlives the last claim: %v", err)
	}
}

// With the view on, each claim's entry mounts its view, which says the
// claim's size; a claim released loses its view with its entry, and a
// view that cannot be made leaves the entries without the view rather
// than without the claims.
func TestClaimsViews(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libyunion-mps-view.so")
	store := view.Store{Dir: filepath.Join(dir, "view")}
	w := view.NewWriter(store, t.TempDir())
	s := Spec{CDI: cdi.Options{Dir: filepath.Join(dir, "cdi"), DevRoot: filepath.Join(dir, "dev"),
		View: cdi.View{Library: lib, Platforms: store.PlatformsPath(), Preload: store.PreloadPath()}},
		Identity: identity.Store{Dir: filepath.Join(dir, "id")}, Views: w}
	// A fixed slice's view, the agent's: never the claims' Sync's to remove.
	slice := vdev.NameOf(uuid, 3)
	if _, err := w.Sync(func(n vdev.Name) bool { return !claim.IsClaimName(n) }, []view.Device{{Name: slice, Cap: 20480}}); err != nil {
		t.Fatal(err)
	}
	small, err := claim.NewDevice(base(filepath.Join(dir, "pipe")), 0, 1024, 0)
	if err != nil {
		t.Fatal(err)
	}
	large, err := claim.NewDevice(base(filepath.Join(dir, "pipe")), 1, 70000, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cw cdi.Writer
	path, _, err := s.claims(&cw, []cdi.Device{small, large})
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := os.ReadFile(path)
	for _, d := range []cdi.Device{small, large} {
		vd, _ := store.Path(d.Name())
		b, err := os.ReadFile(filepath.Join(vd, view.MemoryFile))
		if err != nil {
			t.Fatal(err)
		}
		if m, err := view.Parse(b); err != nil || m.Total != d.MemoryLimit.Bytes() {
			t.Errorf("%s's view says %+v, %v; want its size, %d MiB", d.Name(), m, err, d.MemoryLimit)
		}
		if !strings.Contains(string(spec), "hostPath: "+vd+"\n") {
			t.Errorf("the spec does not mount %s", vd)
		}
	}
	if !strings.Contains(string(spec), "containerPath: /etc/ld.so.preload") || !strings.Contains(string(spec), "hostPath: "+lib) {
		t.Errorf("the spec lacks the library or the preload list:\n%s", spec)
	}
	// The large claim released.
	if _, _, err := s.claims(&cw, []cdi.Device{small}); err != nil {
		t.Fatal(err)
	}
	views := w.Views()
	if _, ok := views[large.Name()]; ok {
		t.Error("a released claim keeps its view")
	}
	if _, ok := views[slice]; !ok {
		t.Error("the claims' Sync removed a fixed slice's view")
	}
	// The views' directory unusable: the claims keep their entries,
	// without the view.
	if err := os.RemoveAll(store.Dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(store.Dir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	path, _, err = s.claims(&cw, []cdi.Device{small})
	if err != nil {
		t.Fatal(err)
	}
	spec, _ = os.ReadFile(path)
	if !strings.Contains(string(spec), "name: "+small.Name().String()) || strings.Contains(string(spec), "ld.so.preload") {
		t.Errorf("without its views the claims' spec is\n%s", spec)
	}
}

// Entry is a device's entry as the spec has it, written by no one: its
// identity file, and its view directory only while the view is on.
func TestEntry(t *testing.T) {
	dir := t.TempDir()
	s := ForHost(dir, t.TempDir())
	d := base(filepath.Join(dir, "pipe"))
	e, err := s.Entry(d)
	idf, _ := s.Identity.Path(d.Name())
	if err != nil || e.IdentityFile != idf || e.ViewDir != "" {
		t.Errorf("view off: %+v, %v", e, err)
	}
	s.CDI.View = s.ViewOf(filepath.Join(dir, view.LibraryFile))
	e, err = s.Entry(d)
	vd, _ := s.Views.Store().Path(d.Name())
	if err != nil || e.IdentityFile != idf || e.ViewDir != vd || vd == "" {
		t.Errorf("view on: %+v, %v", e, err)
	}
	if _, err := os.Stat(idf); !os.IsNotExist(err) {
		t.Errorf("Entry wrote the identity file: %v", err)
	}
	bad := d
	bad.GPU.UUID = "../x"
	if _, err := s.Entry(bad); err == nil {
		t.Error("a name that is no file's: no error")
	}
}
