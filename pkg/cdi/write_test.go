package cdi

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"yunion.io/x/mps-daemon/internal/testsupport/golden"
	"yunion.io/x/mps-daemon/pkg/version"
)

// TestWriteGolden pins the file runtimes read: its name, and every byte.
func TestWriteGolden(t *testing.T) {
	defer func(v string) { version.Version = v }(version.Version)
	version.Version = "dev" // whatever -ldflags stamped in
	o := testOptions(t)
	path, changed, err := Sync(o, hostDevices())
	if err != nil || !changed {
		t.Fatalf("Sync = %v, %v", changed, err)
	}
	if filepath.Base(path) != "yunion.io-mps-gpu.yaml" || filepath.Dir(path) != o.Dir {
		t.Errorf("spec written to %s, want %s/yunion.io-mps-gpu.yaml", path, o.Dir)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "spec.golden.yaml", got)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("spec mode %v (%v), want 0644 so every runtime can read it", fi.Mode(), err)
	}
}

// TestWriteIdenticalIsNoop: the same devices again leave the file alone
// (same inode, same mtime: runtimes watching the directory see nothing); a
// change renames a new file in.
func TestWriteIdenticalIsNoop(t *testing.T) {
	o := testOptions(t)
	path, _, err := Sync(o, hostDevices())
	if err != nil {
		t.Fatal(err)
	}
	first := statID(t, path)
	for range 3 {
		_, changed, err := Sync(o, hostDevices())
		if err != nil || changed {
			t.Fatalf("identical Sync = changed %v, %v; want no change", changed, err)
		}
		if statID(t, path) != first {
			t.Fatal("identical spec rewrote the file")
		}
	}
	devs := hostDevices()
	devs[0].MemoryLimit--
	if _, changed, err := Sync(o, devs); err != nil || !changed {
		t.Fatalf("changed Sync = %v, %v", changed, err)
	}
	if statID(t, path).ino == first.ino {
		t.Error("a changed spec was written in place, not renamed in")
	}
	if names := dirNames(t, o.Dir); len(names) != 1 {
		t.Errorf("directory holds %q, want only the spec", names)
	}
}

// TestWriteAtomic: a reader polling the file while it is replaced again and
// again only ever reads one whole spec or the other.
func TestWriteAtomic(t *testing.T) {
	o := testOptions(t)
	devsA, devsB := hostDevices(), hostDevices()
	devsB[0].ThreadPercentage = 10
	specA := mustBuild(t, o, devsA)
	specB := mustBuild(t, o, devsB)
	path, _, err := Write(o, specA)
	if err != nil {
		t.Fatal(err)
	}
	wantA, _ := os.ReadFile(path)
	wantB, _ := encode(specB)

	done := make(chan struct{})
	var wg sync.WaitGroup
	var reads, torn int
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			b, err := os.ReadFile(path)
			reads++
			if err != nil || !(bytes.Equal(b, wantA) || bytes.Equal(b, wantB)) {
				torn++
			}
		}
	})
	for i := range 60 {
		s := specA
		if i%2 == 0 {
			s = specB
		}
		if _, changed, err := Write(o, s); err != nil || !changed {
			t.Errorf("write %d: changed %v, %v", i, changed, err)
		}
	}
	close(done)
	wg.Wait()
	if torn > 0 {
		t.Errorf("%d of %d reads saw a missing or partial spec", torn, reads)
	}
}

// TestWriteRefused: specs that the checks or the CDI library's loader refuse
// leave the old file byte for byte, and no temporary file behind.
func TestWriteRefused(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(*specs.Spec)
		expect string
	}{
		{"device name with a space", func(s *specs.Spec) { s.Devices[0].Name = "GPU 0" }, "invalid character ' '"},
		{"two devices of one name", func(s *specs.Spec) { s.Devices[1].Name = s.Devices[0].Name }, "appears twice"},
		{"variable without =", func(s *specs.Spec) { s.Devices[0].ContainerEdits.Env[0] = "NVIDIA_VISIBLE_DEVICES" }, `invalid environment variable "NVIDIA_VISIBLE_DEVICES"`},
		{"mount without host path", func(s *specs.Spec) { s.Devices[2].ContainerEdits.Mounts[0].HostPath = "" }, "empty host path"},
		{"version too old for inventory ids", func(s *specs.Spec) { s.Version = "0.4.0" }, "must be at least v0.5.0"},
		{"unknown version", func(s *specs.Spec) { s.Version = "9.9.9" }, `invalid version "9.9.9"`},
		{"other kind", func(s *specs.Spec) { s.Kind = "nvidia.com/gpu" }, `spec of kind "nvidia.com/gpu"`},
		{"no devices", func(s *specs.Spec) { s.Devices = nil }, "no virtual devices"},
		// The library's loader refuses this one; validateSpec mirrors it.
		{"device without edits", func(s *specs.Spec) { s.Devices[3].ContainerEdits = specs.ContainerEdits{} }, "no container edits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testOptions(t)
			path, _, err := Sync(o, hostDevices())
			if err != nil {
				t.Fatal(err)
			}
			before, _ := os.ReadFile(path)
			id := statID(t, path)
			s, err := Build(o, hostDevices())
			if err != nil {
				t.Fatal(err)
			}
			s.Devices[0].ContainerEdits.Env[1] = "CUDA_MPS_PIPE_DIRECTORY=/elsewhere" // so the bytes differ
			tt.edit(s)
			_, changed, err := Write(o, s)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.expect) || changed {
				t.Fatalf("Write = changed %v, %v; want ErrInvalid saying %q", changed, err, tt.expect)
			}
			after, _ := os.ReadFile(path)
			if !bytes.Equal(before, after) || statID(t, path) != id {
				t.Error("the old spec was touched")
			}
			if names := dirNames(t, o.Dir); len(names) != 1 {
				t.Errorf("directory holds %q, want only the spec", names)
			}
		})
	}
}

// TestWriteCleansStaleTemps: a temporary file a crash left is removed by the
// next write; runtimes never read it meanwhile (it does not end in .yaml).
func TestWriteCleansStaleTemps(t *testing.T) {
	o := testOptions(t)
	stale := filepath.Join(o.Dir, ".yunion.io-mps-gpu.yaml.12345.tmp")
	if err := os.WriteFile(stale, []byte("cdiVersion: 0.6.0\nkind: yunion.io/mps-g"), 0o644); err != nil {
		t.Fatal(err)
	}
	loadCache(t, o.Dir) // the half-written file is not a spec to runtimes
	if _, _, err := Sync(o, hostDevices()); err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, o.Dir); len(names) != 1 || names[0] != "yunion.io-mps-gpu.yaml" {
		t.Errorf("directory holds %q, want only the spec", names)
	}
}

// TestSyncNoDevicesRemoves: with no virtual devices left the spec goes, so
// runtimes refuse the old names instead of starting containers on them.
func TestSyncNoDevicesRemoves(t *testing.T) {
	o := testOptions(t)
	o.Dir = filepath.Join(o.Dir, "not", "yet")
	path, changed, err := Sync(o, hostDevices())
	if err != nil || !changed {
		t.Fatalf("Sync into a new directory = %v, %v", changed, err)
	}
	if _, changed, err := Sync(o, nil); err != nil || !changed {
		t.Fatalf("Sync(no devices) = %v, %v; want the file removed", changed, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("spec still there: %v", err)
	}
	if _, changed, err := Sync(o, nil); err != nil || changed {
		t.Errorf("Sync(no devices) again = %v, %v; want no change", changed, err)
	}
}
