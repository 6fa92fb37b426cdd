package claim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/identity"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

const uuid = gpu.UUID("GPU-81df1fb7-5946-da34-7f70-c730b0456642")

func base(pipe string) cdi.Device {
	return cdi.FromVirtual(vdev.Device{GPU: gpu.Info{UUID: uuid, Minor: 3}, MemoryLimit: 81559, ThreadPercentage: 60}, "", pipe)
}

// A claim's device is its GPU's with the claim's caps, at IndexBase plus
// its slot; what a client could not be given is refused.
func TestDevice(t *testing.T) {
	b := base("/run/pipe")
	d, err := Device(b, 2, 20480, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name() != vdev.NameOf(uuid, 1002) || d.MemoryLimit != 20480 || d.ThreadPercentage != 60 || d.PipeDir != "/run/pipe" || d.GPU.Minor != 3 {
		t.Errorf("device %+v", d)
	}
	if slot, ok := IsClaim(d.Index); !ok || slot != 2 {
		t.Errorf("IsClaim(%d) = %d %v", d.Index, slot, ok)
	}
	if _, ok := IsClaim(47); ok {
		t.Error("a fixed slice's index taken for a claim's")
	}
	if d, err := Device(b, 0, 81559, 25); err != nil || d.ThreadPercentage != 25 {
		t.Errorf("the whole GPU at 25%%: %+v %v", d, err)
	}
	for _, tc := range []struct {
		slot, threads int
		mem           int
		want          string
	}{
		{-1, 0, 1, "slot -1"},
		{0, 0, 0, "claim of 0 MiB: want more than 0"},
		{0, 0, -5, "claim of -5 MiB"},
		{0, 0, 81560, "offers 81559 MiB at most"},
		{0, 61, 1024, "offers 1 to 60%"},
		{0, -1, 1024, "offers 1 to 60%"},
	} {
		if _, err := Device(b, tc.slot, unitsMiB(tc.mem), tc.threads); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Device(slot %d, %d MiB, %d%%): %v, want %q", tc.slot, tc.mem, tc.threads, err, tc.want)
		}
	}
}

// Sync makes each claim's identity file before the spec names it, writes
// the claims' spec under its own kind, and removes it when no claim is
// left.
func TestSync(t *testing.T) {
	dir, err := os.MkdirTemp("", "claim")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := Spec{CDI: cdi.Options{Dir: filepath.Join(dir, "cdi"), DevRoot: filepath.Join(dir, "dev")}, Identity: identity.Store{Dir: filepath.Join(dir, "id")}}
	d, err := Device(base(filepath.Join(dir, "pipe")), 0, 1024, 0)
	if err != nil {
		t.Fatal(err)
	}
	var w cdi.Writer
	path, changed, err := s.Sync(&w, DefaultKind, []cdi.Device{d})
	if err != nil || !changed || filepath.Base(path) != "yunion.io-mps-claim.yaml" {
		t.Fatalf("Sync: %s %v %v", path, changed, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	name := vdev.NameOf(uuid, IndexBase).String()
	for _, want := range []string{"kind: " + DefaultKind, "name: " + name, cdi.EnvMemoryLimit + "=0=1024M", cdi.EnvThreadPercentage + "=60"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the spec lacks %q:\n%s", want, b)
		}
	}
	idf, _ := s.Identity.Path(vdev.Name(name))
	if got, err := os.ReadFile(idf); err != nil || string(got) != name+"\n" {
		t.Errorf("identity file %s: %q %v", idf, got, err)
	}
	if _, changed, err := s.Sync(&w, DefaultKind, []cdi.Device{d}); err != nil || changed {
		t.Errorf("the same claims again: changed %v, %v", changed, err)
	}
	if _, changed, err := s.Sync(&w, DefaultKind, nil); err != nil || !changed {
		t.Errorf("no claims: changed %v, %v", changed, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the spec outlives the last claim: %v", err)
	}
}

func unitsMiB(v int) units.MiB { return units.MiB(v) }
