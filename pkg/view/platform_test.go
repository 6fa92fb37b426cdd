package view

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"yunion.io/x/mps-daemon/pkg/vdev"
)

// TestPlatformDirectory: the directory the preload list names the library
// through ($PLATFORM): the host's own platforms are links to "..", where a
// container has the library; every other platform of the x86 and Arm
// families has a stub of its class and machine, an ELF shared object a
// loader takes (docs/containers.md; tenant/test/run.sh loads each with a
// real loader of its platform). A directory made on another architecture
// is put right.
func TestPlatformDirectory(t *testing.T) {
	for _, tc := range []struct {
		arch   string
		native machine
		links  []string
		stubs  map[string]elf.Machine
	}{
		{"amd64", machineX8664, []string{"x86_64", "haswell", "xeon_phi"},
			map[string]elf.Machine{"i686": elf.EM_386, "i386": elf.EM_386, "aarch64": elf.EM_AARCH64, "v7l": elf.EM_ARM, "v8l": elf.EM_ARM}},
		{"arm64", machineArm64, []string{"aarch64"},
			map[string]elf.Machine{"x86_64": elf.EM_X86_64, "haswell": elf.EM_X86_64, "i686": elf.EM_386, "v8l": elf.EM_ARM}},
	} {
		t.Run(tc.arch, func(t *testing.T) {
			w := newWriter(t, "")
			if err := syncViews(t, w, ownSlices, []Device{{vdev.NameOf(gpuA, 0), 1024}}); err != nil {
				t.Fatal(err)
			}
			// The same store, the other architecture's writer, then this one.
			other := NewWriter(w.Store(), t.TempDir())
			other.native = machineArm64
			if tc.native == machineArm64 {
				other.native = machineX8664
			}
			w = NewWriter(w.Store(), t.TempDir())
			w.native = tc.native
			for _, x := range []*Writer{other, w} {
				if err := syncViews(t, x, ownSlices, []Device{{vdev.NameOf(gpuA, 0), 1024}}); err != nil {
					t.Fatal(err)
				}
			}
			dir := w.Store().PlatformsPath()
			for _, l := range tc.links {
				if to, err := os.Readlink(filepath.Join(dir, l)); err != nil || to != ".." {
					t.Errorf("%s: %q, %v; want a link to ..", l, to, err)
				}
			}
			for p, em := range tc.stubs {
				f, err := elf.Open(filepath.Join(dir, p, LibraryFile))
				if err != nil {
					t.Errorf("%s: %v", p, err)
					continue
				}
				class := elf.ELFCLASS64
				if em == elf.EM_386 || em == elf.EM_ARM {
					class = elf.ELFCLASS32
				}
				if f.Machine != em || f.Class != class || f.Type != elf.ET_DYN {
					t.Errorf("%s: %v %v %v, want a shared object of %v %v", p, f.Type, f.Class, f.Machine, class, em)
				}
				var load, stack int
				for _, prog := range f.Progs {
					if prog.Flags&elf.PF_X != 0 {
						t.Errorf("%s: an executable segment %+v", p, prog.ProgHeader)
					}
					switch prog.Type {
					case elf.PT_LOAD:
						load++
					case elf.PT_GNU_STACK:
						stack++
					}
				}
				if load != 1 || stack != 1 {
					t.Errorf("%s: %d loads, %d stack headers; want one each", p, load, stack)
				}
				f.Close()
				if fi, err := os.Stat(filepath.Join(dir, p, LibraryFile)); err != nil || fi.Mode().Perm() != 0o444 {
					t.Errorf("%s: %v %v, want mode 0444", p, fi.Mode(), err)
				}
			}
			if n, err := os.ReadDir(dir); err != nil || len(n) != len(platformMachines) {
				t.Errorf("%d entries, %v; want one per platform (%d)", len(n), err, len(platformMachines))
			}
		})
	}
}
