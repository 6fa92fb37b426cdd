package identity

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

const (
	gpuA = "GPU-4baeae3a-899f-8852-bd11-2e4ce3171eb0"
	gpuB = "GPU-76aef7ff-372d-2432-b4b4-beca4d8d3400"
)

func ino(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func TestEnsureCreatesStableRootOnlyFiles(t *testing.T) {
	s := Store{Dir: filepath.Join(t.TempDir(), "state", "identity")}
	names := []vdev.Name{vdev.NameOf(gpuA, 0), vdev.NameOf(gpuA, 1), vdev.NameOf(gpuB, 3)}
	if err := s.Ensure(names); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(s.Dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("identity directory mode %v (%v), want 0700: nobody but root may reach the files", fi.Mode(), err)
	}
	p, _ := s.Path(vdev.NameOf(gpuB, 3))
	if filepath.Base(p) != gpuB+".3" {
		t.Errorf("file name %q, want %s.3 (no colon)", filepath.Base(p), gpuB)
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != gpuB+"::3\n" {
		t.Errorf("content %q (%v)", b, err)
	}
	if fi, _ := os.Lstat(p); fi.Mode().Perm() != 0o444 {
		t.Errorf("file mode %v, want 0444", fi.Mode())
	}
	before := ino(t, p)

	// A second Ensure (every reconcile) keeps the same inode; damage is
	// repaired in place, never by a new file.
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("GPU-evil::9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(s.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := s.Ensure(names); err != nil {
		t.Fatal(err)
	}
	if ino(t, p) != before {
		t.Error("Ensure replaced an identity file: a container holding the old one would lose its identity")
	}
	if b, _ := os.ReadFile(p); string(b) != gpuB+"::3\n" {
		t.Errorf("damaged content not repaired: %q", b)
	}
	if fi, _ := os.Lstat(p); fi.Mode().Perm() != 0o444 {
		t.Errorf("mode not repaired: %v", fi.Mode())
	}
	if fi, _ := os.Lstat(s.Dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode not tightened: %v", fi.Mode())
	}
	entries, _ := os.ReadDir(s.Dir)
	if len(entries) != 3 {
		t.Errorf("%d entries in the identity directory, want 3 (no temporary files left)", len(entries))
	}

	tab, err := s.Table()
	if err != nil {
		t.Fatal(err)
	}
	if len(tab) != 3 {
		t.Errorf("table %v, want 3 files", tab)
	}
	st := func(p string) FileID {
		fi, _ := os.Lstat(p)
		s := fi.Sys().(*syscall.Stat_t)
		return FileID{uint64(s.Dev), s.Ino}
	}
	if tab[st(p)] != gpuB+"::3" {
		t.Errorf("table maps %s's inode to %q", p, tab[st(p)])
	}
}

func TestEnsureRefusesWhatIsNotItsOwn(t *testing.T) {
	s := Store{Dir: filepath.Join(t.TempDir(), "identity")}
	if err := s.Ensure(nil); err != nil {
		t.Fatal(err)
	}
	p, _ := s.Path(vdev.NameOf(gpuA, 0))
	if err := os.Symlink("/etc/passwd", p); err != nil {
		t.Fatal(err)
	}
	err := s.Ensure([]vdev.Name{vdev.NameOf(gpuA, 0), vdev.NameOf(gpuA, 1)})
	if err == nil || !strings.Contains(err.Error(), "not ours to replace") {
		t.Errorf("a symlink at an identity file's path: %v", err)
	}
	if l, _ := os.Readlink(p); l != "/etc/passwd" {
		t.Error("the symlink was touched")
	}
	if p1, _ := s.Path(vdev.NameOf(gpuA, 1)); !exists(p1) {
		t.Error("one bad entry kept the others from being made")
	}
	for _, bad := range []string{"GPU-x", "GPU-a/b::0", "../x::1", "GPU-x::-1"} {
		if err := s.Ensure([]vdev.Name{vdev.Name(bad)}); !errors.Is(err, vdev.ErrBadName) {
			t.Errorf("name %q: %v, want ErrBadName", bad, err)
		}
	}
	if err := (Store{Dir: "rel/identity"}).Ensure(nil); err == nil {
		t.Error("a relative directory was accepted")
	}
	// A symlink in place of the directory is refused, not followed.
	link := filepath.Join(t.TempDir(), "identity")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	if err := (Store{Dir: link}).Ensure([]vdev.Name{vdev.NameOf(gpuA, 0)}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("identity directory as a symlink: %v", err)
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func TestTableOfMissingDirectoryIsEmpty(t *testing.T) {
	tab, err := Store{Dir: filepath.Join(t.TempDir(), "none")}.Table()
	if err != nil || len(tab) != 0 {
		t.Errorf("Table = %v, %v", tab, err)
	}
}

// fakeProc is a /proc/<pid> directory whose root is a directory of the
// test: what Find reads of a process, without privileges.
type fakeProc struct {
	t     *testing.T
	store Store
	table Table
	proc  *os.File
	root  string // the "container's" root directory
}

func newFakeProc(t *testing.T, rootBelow string) *fakeProc {
	t.Helper()
	base := t.TempDir()
	s := Store{Dir: filepath.Join(base, "state", "identity")}
	if err := s.Ensure([]vdev.Name{vdev.NameOf(gpuA, 0), vdev.NameOf(gpuA, 1), vdev.NameOf(gpuB, 2)}); err != nil {
		t.Fatal(err)
	}
	tab, err := s.Table()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "ctr")
	procRoot := filepath.Join(root, rootBelow)
	pid := filepath.Join(base, "proc", "4242")
	for _, d := range []string{procRoot, pid} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(procRoot, filepath.Join(pid, "root")); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &fakeProc{t: t, store: s, table: tab, proc: f, root: root}
}

// at is the path of GPU uuid's identity file in the fake container.
func (p *fakeProc) at(uuid gpu.UUID) string {
	p.t.Helper()
	dst := filepath.Join(p.root, ContainerPath(uuid))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		p.t.Fatal(err)
	}
	return dst
}

// mount stands in for the CDI bind mount: a hard link gives the store's
// inode a second path, as a bind mount does.
func (p *fakeProc) mount(name vdev.Name, uuid gpu.UUID) {
	p.t.Helper()
	src, _ := p.store.Path(name)
	if err := os.Link(src, p.at(uuid)); err != nil {
		p.t.Fatal(err)
	}
}

func (p *fakeProc) find(uuid gpu.UUID) (string, string, error) {
	return Find(int(p.proc.Fd()), uuid, p.table)
}

func TestFindAcceptsOnlyTheDaemonsOwnFile(t *testing.T) {
	t.Run("mounted file", func(t *testing.T) {
		p := newFakeProc(t, "")
		p.mount(vdev.NameOf(gpuA, 1), gpuA)
		name, decoy, err := p.find(gpuA)
		if err != nil || name != gpuA+"::1" || decoy != "" {
			t.Errorf("Find = %q, %q, %v", name, decoy, err)
		}
		if _, _, err := p.find(gpuB); !errors.Is(err, ErrNotFound) {
			t.Errorf("GPU B has no file in this container: %v", err)
		}
	})
	decoys := []struct {
		name  string
		plant func(p *fakeProc)
		want  string
	}{
		{"a copy with the right content", func(p *fakeProc) {
			if err := os.WriteFile(p.at(gpuA), []byte(gpuA+"::0\n"), 0o444); err != nil {
				t.Fatal(err)
			}
		}, "did not make"},
		{"an absolute symlink to the host file", func(p *fakeProc) {
			src, _ := p.store.Path(vdev.NameOf(gpuA, 0))
			if err := os.Symlink(src, p.at(gpuA)); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"a symlinked directory on the way", func(p *fakeProc) {
			elsewhere := t.TempDir()
			if err := os.MkdirAll(filepath.Join(elsewhere, "devices"), 0o755); err != nil {
				t.Fatal(err)
			}
			src, _ := p.store.Path(vdev.NameOf(gpuA, 0))
			if err := os.Link(src, filepath.Join(elsewhere, "devices", gpuA)); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(p.root, "run"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(elsewhere, filepath.Join(p.root, "run", "yunion-mps")); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"a FIFO (never opened: no blocking)", func(p *fakeProc) {
			if err := syscall.Mkfifo(p.at(gpuA), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"a directory", func(p *fakeProc) {
			if err := os.Mkdir(p.at(gpuA), 0o755); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"a huge sparse file (never read)", func(p *fakeProc) {
			f, err := os.Create(p.at(gpuA))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(64 << 30); err != nil {
				t.Fatal(err)
			}
		}, "did not make"},
		{"another GPU's device file at this GPU's path", func(p *fakeProc) {
			p.mount(vdev.NameOf(gpuB, 2), gpuA)
		}, "a device of another GPU"},
	}
	for _, d := range decoys {
		t.Run(d.name, func(t *testing.T) {
			p := newFakeProc(t, "")
			d.plant(p)
			start := time.Now()
			name, decoy, err := p.find(gpuA)
			if !errors.Is(err, ErrNotFound) || name != "" {
				t.Errorf("Find = %q, %v: a decoy was accepted", name, err)
			}
			if !strings.Contains(decoy, d.want) {
				t.Errorf("decoy described as %q, want it to say %q", decoy, d.want)
			}
			if time.Since(start) > 10*time.Second {
				t.Errorf("Find took %v", time.Since(start))
			}
		})
	}
	t.Run("a device node (root only)", func(t *testing.T) {
		p := newFakeProc(t, "")
		// /dev/null's numbers: opening it would be harmless, but Find must
		// not open it at all.
		if err := syscall.Mknod(p.at(gpuA), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			t.Skipf("mknod: %v", err)
		}
		if name, decoy, err := p.find(gpuA); !errors.Is(err, ErrNotFound) || !strings.Contains(decoy, "not a regular file") {
			t.Errorf("Find = %q, %q, %v", name, decoy, err)
		}
	})
}

// A process that chroot()ed into a directory of its container still finds
// the container's file, above its own root; a decoy in its jail does not
// stop the climb.
func TestFindClimbsOutOfAChroot(t *testing.T) {
	p := newFakeProc(t, "tmp/jail")
	p.mount(vdev.NameOf(gpuA, 0), gpuA)
	jail := filepath.Join(p.root, "tmp", "jail", ContainerPath(gpuA))
	if err := os.MkdirAll(filepath.Dir(jail), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(jail, []byte(gpuB+"::2\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	name, decoy, err := p.find(gpuA)
	if err != nil || name != gpuA+"::0" {
		t.Errorf("Find = %q, %v; want the container's file above the jail", name, err)
	}
	if !strings.Contains(decoy, "0 level(s) above") {
		t.Errorf("the decoy in the jail should be reported: %q", decoy)
	}
}

// A process chroot()ed deeper than maxLevels costs a bounded number of
// calls: the climb jumps to the top of the namespace (here the test's own
// root, where no identity file is) instead of looking at every level.
func TestFindBelowAVeryDeepRoot(t *testing.T) {
	p := newFakeProc(t, strings.Repeat("d/", 3*maxLevels))
	p.mount(vdev.NameOf(gpuA, 0), gpuA) // at the container's root, far above
	start := time.Now()
	if name, _, err := p.find(gpuA); !errors.Is(err, ErrNotFound) {
		t.Errorf("Find = %q, %v; want ErrNotFound (only the top is searched that far up)", name, err)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("Find took %v", time.Since(start))
	}
}

func TestFindOnAProcessThatIsGone(t *testing.T) {
	dir := t.TempDir() // a /proc/<pid> with no root link: the process exited
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, _, err := Find(int(f.Fd()), gpuA, Table{}); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("Find = %v, want an error that is not ErrNotFound", err)
	}
	if _, _, err := Find(int(f.Fd()), "GPU-../x", Table{}); !errors.Is(err, vdev.ErrBadName) {
		t.Errorf("a GPU UUID with a slash: %v", err)
	}
}
