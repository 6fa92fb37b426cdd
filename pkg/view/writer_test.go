package view

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

const gpuB gpu.UUID = "GPU-76aef7ff-372d-2432-b4b4-beca4d8d3400"

// claimIndex stands for pkg/claim's IndexBase: the devices the Kubernetes
// driver owns.
const claimIndex = 1000

func ownSlices(n vdev.Name) bool {
	_, i, _ := vdev.ParseName(string(n))
	return i < claimIndex
}

func ownClaims(n vdev.Name) bool { return !ownSlices(n) }

// newWriter is a Writer of a fresh state directory with a /proc of no
// processes (no container holds anything) unless procRoot is given.
func newWriter(t *testing.T, procRoot string) *Writer {
	t.Helper()
	if procRoot == "" {
		procRoot = t.TempDir()
	}
	return NewWriter(Store{Dir: filepath.Join(t.TempDir(), "state", "view")}, procRoot)
}

// read is a device's view file as the library would find it.
func read(t *testing.T, w *Writer, name vdev.Name) (Memory, uint64) {
	t.Helper()
	dir, err := w.Store().Path(name)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, MemoryFile))
	if err != nil {
		t.Fatalf("view of %s: %v", name, err)
	}
	m, err := Parse(b)
	if err != nil {
		t.Fatalf("view of %s: %v", name, err)
	}
	return m, inode(t, filepath.Join(dir, MemoryFile))
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func exists(t *testing.T, w *Writer, name vdev.Name) bool {
	t.Helper()
	dir, _ := w.Store().Path(name)
	_, err := os.Lstat(dir)
	return err == nil
}

func TestSyncWritesEachDeviceItsCapAndTheUsedItLastHeard(t *testing.T) {
	w := newWriter(t, "")
	a0, a1 := vdev.NameOf(gpuA, 0), vdev.NameOf(gpuA, 1)
	if err := syncViews(t, w, ownSlices, []Device{{a0, 20480}, {a1, 20480}}); err != nil {
		t.Fatal(err)
	}
	m, ino := read(t, w, a0)
	if m != (Memory{Total: 20480 << 20}) {
		t.Errorf("new view %+v, want the cap and nothing used", m)
	}
	// Modes: every container user reads, nobody writes.
	dir, _ := w.Store().Path(a0)
	for p, want := range map[string]os.FileMode{w.Store().Dir: 0o755, dir: 0o755, filepath.Join(dir, MemoryFile): 0o444, w.Store().PreloadPath(): 0o444} {
		if fi, err := os.Lstat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want mode %v", p, fi.Mode(), err, want)
		}
	}
	if b, _ := os.ReadFile(w.Store().PreloadPath()); string(b) != "/run/yunion-mps/lib/p/$PLATFORM/libyunion-mps-view.so\n" {
		t.Errorf("preload list %q", b)
	}

	// The accounting's figure, then the same again: written once.
	if err := w.SetUsed(map[vdev.Name]units.Bytes{a0: 4096 << 20, a1: 0}); err != nil {
		t.Fatal(err)
	}
	m, ino2 := read(t, w, a0)
	if m.Used != 4096<<20 || ino2 == ino {
		t.Errorf("after SetUsed: %+v (inode %d, was %d); want used 4096 MiB in a new file", m, ino2, ino)
	}
	_, inoA1 := read(t, w, a1)
	if err := w.SetUsed(map[vdev.Name]units.Bytes{a0: 4096 << 20, a1: 0}); err != nil {
		t.Fatal(err)
	}
	if _, ino3 := read(t, w, a0); ino3 != ino2 {
		t.Error("the same figure replaced the file again")
	}
	if _, ino := read(t, w, a1); ino != inoA1 {
		t.Error("an unchanged device's file was replaced")
	}
	// A device missing from the figures keeps its own; one the Writer has
	// no view of gets none.
	stranger := vdev.NameOf(gpuB, 5)
	if err := w.SetUsed(map[vdev.Name]units.Bytes{a1: 1 << 20, stranger: 1}); err != nil {
		t.Fatal(err)
	}
	if m, _ := read(t, w, a0); m.Used != 4096<<20 {
		t.Errorf("a device not measured lost its figure: %+v", m)
	}
	if exists(t, w, stranger) {
		t.Error("SetUsed made a view of a device no owner declared")
	}

	// A resize: the cap changes, the used figure stays; a Sync that
	// changes nothing replaces nothing.
	if err := syncViews(t, w, ownSlices, []Device{{a0, 40960}, {a1, 20480}}); err != nil {
		t.Fatal(err)
	}
	m, ino4 := read(t, w, a0)
	if m != (Memory{Total: 40960 << 20, Used: 4096 << 20}) {
		t.Errorf("after a resize %+v", m)
	}
	if err := syncViews(t, w, ownSlices, []Device{{a0, 40960}, {a1, 20480}}); err != nil {
		t.Fatal(err)
	}
	if _, ino5 := read(t, w, a0); ino5 != ino4 {
		t.Error("a Sync that changed nothing replaced the file")
	}
}

func TestBadCapsReachNoContainer(t *testing.T) {
	w := newWriter(t, "")
	good, zero, huge := vdev.NameOf(gpuA, 0), vdev.NameOf(gpuA, 1), vdev.NameOf(gpuA, 2)
	err := syncViews(t, w, ownSlices, []Device{{good, 1024}, {zero, 0}, {huge, maxCap + 1}, {"a/b::1", 5}})
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, vdev.ErrBadName) {
		t.Fatalf("Sync: %v; want each bad device named", err)
	}
	for _, n := range []vdev.Name{zero, huge} {
		if !strings.Contains(err.Error(), n.String()) {
			t.Errorf("the error does not name %s: %v", n, err)
		}
		dir, _ := w.Store().Path(n)
		if _, err := os.Stat(filepath.Join(dir, MemoryFile)); err == nil {
			t.Errorf("%s got a view file", n)
		}
	}
	if m, _ := read(t, w, good); m.Total != 1024<<20 {
		t.Errorf("the good device's view: %+v", m)
	}
	// A good view, then a bad cap for it: the old file stays.
	if err := syncViews(t, w, ownSlices, []Device{{good, 0}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Sync: %v", err)
	}
	if m, _ := read(t, w, good); m.Total != 1024<<20 {
		t.Errorf("a bad cap changed the view to %+v", m)
	}
}

// A restarted daemon's new Writer keeps the used_bytes its predecessor
// wrote while the cap is the same, so a container asking between the
// restart and the next accounting pass is never told the device is empty;
// a device whose cap changed, or whose file is not a view, starts at 0.
func TestANewWriterKeepsTheUsedOnFile(t *testing.T) {
	store := Store{Dir: filepath.Join(t.TempDir(), "state", "view")}
	procRoot := t.TempDir()
	a0, a1, a2, a3 := vdev.NameOf(gpuA, 0), vdev.NameOf(gpuA, 1), vdev.NameOf(gpuA, 2), vdev.NameOf(gpuA, 3)
	devs := []Device{{a0, 20480}, {a1, 20480}, {a2, 20480}, {a3, 20480}}
	first := NewWriter(store, procRoot)
	if err := syncViews(t, first, ownSlices, devs); err != nil {
		t.Fatal(err)
	}
	if err := first.SetUsed(map[vdev.Name]units.Bytes{a0: 5 << 30, a1: 3 << 30, a2: 1 << 30, a3: 2 << 30}); err != nil {
		t.Fatal(err)
	}
	// a2's file no library would read; a3's cap changes over the restart.
	dir2, _ := store.Path(a2)
	if err := os.Chmod(filepath.Join(dir2, MemoryFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir2, MemoryFile), []byte("total_bytes 21474836480\nused_bytes x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	devs[3].Cap = 10240

	restarted := NewWriter(store, procRoot)
	if err := syncViews(t, restarted, ownSlices, devs); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[vdev.Name]Memory{
		a0: {Total: 20480 << 20, Used: 5 << 30},
		a1: {Total: 20480 << 20, Used: 3 << 30},
		a2: {Total: 20480 << 20},
		a3: {Total: 10240 << 20},
	} {
		if m, _ := read(t, restarted, name); m != want {
			t.Errorf("%s after the restart: %+v, want %+v", name, m, want)
		}
		if got := restarted.Views()[name]; got != want {
			t.Errorf("%s: the Writer believes %+v, want %+v", name, got, want)
		}
	}
	// The next measurement replaces the figure, 0 included.
	if err := restarted.SetUsed(map[vdev.Name]units.Bytes{a0: 0}); err != nil {
		t.Fatal(err)
	}
	if m, _ := read(t, restarted, a0); m.Used != 0 {
		t.Errorf("after the accounting measured nothing used: %+v", m)
	}
}

func TestSyncPutsRightWhatItFinds(t *testing.T) {
	w := newWriter(t, "")
	a0 := vdev.NameOf(gpuA, 0)
	if err := syncViews(t, w, ownSlices, []Device{{a0, 1024}}); err != nil {
		t.Fatal(err)
	}
	dir, _ := w.Store().Path(a0)
	file := filepath.Join(dir, MemoryFile)
	// Edited by hand, truncated by a crash, a temporary file left over.
	for _, junk := range []string{"total_bytes 99999999999\n", ""} {
		if err := os.Chmod(file, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(junk), 0o644); err != nil {
			t.Fatal(err)
		}
		stale := filepath.Join(dir, ".memory.123.tmp")
		if err := os.WriteFile(stale, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := syncViews(t, w, ownSlices, []Device{{a0, 1024}}); err != nil {
			t.Fatal(err)
		}
		if m, _ := read(t, w, a0); m.Total != 1024<<20 {
			t.Errorf("after %q: %+v", junk, m)
		}
		if _, err := os.Stat(stale); err == nil {
			t.Error("the stale temporary file is still there")
		}
	}
	// What is not ours to replace: a link where the file goes (never
	// followed), a link instead of the directory, a file instead of it.
	target := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(target, []byte("keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, file); err != nil {
		t.Fatal(err)
	}
	if err := syncViews(t, w, ownSlices, []Device{{a0, 1024}}); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a link at the view file: %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep\n" {
		t.Errorf("the link's target was written: %q", b)
	}
	a1 := vdev.NameOf(gpuA, 1)
	dir1, _ := w.Store().Path(a1)
	if err := os.Symlink(t.TempDir(), dir1); err != nil {
		t.Fatal(err)
	}
	if err := syncViews(t, w, ownSlices, []Device{{a1, 1024}}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a link at the view's directory: %v", err)
	}
}

func TestGoneDevicesLoseTheirViewOnceNoContainerHoldsIt(t *testing.T) {
	proc := t.TempDir()
	w := newWriter(t, proc)
	a0, a1, a2 := vdev.NameOf(gpuA, 0), vdev.NameOf(gpuA, 1), vdev.NameOf(gpuA, 2)
	c0 := vdev.NameOf(gpuA, claimIndex)
	if err := syncViews(t, w, ownSlices, []Device{{a0, 1}, {a1, 1}, {a2, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syncViews(t, w, ownClaims, []Device{{c0, 7}}); err != nil {
		t.Fatal(err)
	}
	// A container of a1 runs (its mount namespace has the directory).
	dir1, _ := w.Store().Path(a1)
	fakeProcess(t, proc, 4242, "mnt:[4026532999]", fmt.Sprintf("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"+
		"700 1 8:1 %s /run/yunion-mps/view/%s ro,nosuid - ext4 /dev/sda1 rw\n", strings.TrimPrefix(dir1, filepath.Dir(filepath.Dir(dir1))), gpuA))
	fakeProcess(t, proc, 1, "mnt:[4026531840]", "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n")

	// The plan drops a1 and a2: a2 goes, a1 stays while held, the claim's
	// view is not the agent's to remove.
	if err := syncViews(t, w, ownSlices, []Device{{a0, 1}}); err != nil {
		t.Fatal(err)
	}
	if exists(t, w, a2) || !exists(t, w, a1) || !exists(t, w, c0) || !exists(t, w, a0) {
		t.Fatalf("after the plan dropped %s and %s: a0 %v a1 %v a2 %v claim %v", a1, a2, exists(t, w, a0), exists(t, w, a1), exists(t, w, a2), exists(t, w, c0))
	}
	// Its view still follows the accounting while held.
	if err := w.SetUsed(map[vdev.Name]units.Bytes{a1: 9}); err != nil {
		t.Fatal(err)
	}
	if m, _ := read(t, w, a1); m.Used != 9 {
		t.Errorf("the held view: %+v", m)
	}
	// The container's namespace cannot be read: nothing is removed.
	if err := os.Remove(filepath.Join(proc, "4242", "mountinfo")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(proc, "4242", "mountinfo"), 0o755); err != nil {
		t.Fatal(err)
	}
	if p, err := w.Sync(ownSlices, []Device{{a0, 1}}); err != nil || p.Err == nil || p.Held != 1 || !exists(t, w, a1) {
		t.Errorf("unreadable mounts: %+v, %v, a1 exists %v; want a0's view made, a1 kept and the failure said", p, err, exists(t, w, a1))
	}
	// The container ended: a1 goes at the next Sync.
	if err := os.RemoveAll(filepath.Join(proc, "4242")); err != nil {
		t.Fatal(err)
	}
	if err := syncViews(t, w, ownSlices, []Device{{a0, 1}}); err != nil {
		t.Fatal(err)
	}
	if exists(t, w, a1) {
		t.Error("a1's view outlived its last container")
	}
	if _, ok := w.Views()[a1]; ok {
		t.Error("the Writer still keeps a1")
	}
	// The claim unprepared: its owner's Sync removes it.
	if err := syncViews(t, w, ownClaims, nil); err != nil {
		t.Fatal(err)
	}
	if exists(t, w, c0) || !exists(t, w, a0) {
		t.Errorf("after the claims' Sync: claim %v, a0 %v", exists(t, w, c0), exists(t, w, a0))
	}
	if _, err := os.Stat(w.Store().PreloadPath()); err != nil {
		t.Errorf("the preload list: %v", err)
	}
}

// syncViews is w.Sync, failing t when a view of a gone device could not be
// told held or removed.
func syncViews(t *testing.T, w *Writer, owns func(vdev.Name) bool, devs []Device) error {
	t.Helper()
	p, err := w.Sync(owns, devs)
	if p.Err != nil {
		t.Errorf("pruning: %v", p.Err)
	}
	return err
}

// fakeProcess puts a process in a fake /proc: its mount namespace link and
// its mountinfo.
func fakeProcess(t *testing.T, proc string, pid int, ns, mountinfo string) {
	t.Helper()
	dir := filepath.Join(proc, fmt.Sprint(pid))
	if err := os.MkdirAll(filepath.Join(dir, "ns"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ns, filepath.Join(dir, "ns", "mnt")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mountinfo"), []byte(mountinfo), 0o444); err != nil {
		t.Fatal(err)
	}
}

func TestOwnersSyncAndTheAccountingWriteAtOnce(t *testing.T) {
	w := newWriter(t, "")
	var wg sync.WaitGroup
	for round := range 20 {
		wg.Go(func() {
			if err := syncViews(t, w, ownSlices, []Device{{vdev.NameOf(gpuA, 0), units.MiB(1 + round)}, {vdev.NameOf(gpuA, 1), 2}}); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			if err := syncViews(t, w, ownClaims, []Device{{vdev.NameOf(gpuB, claimIndex+round%3), 3}}); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			if err := w.SetUsed(map[vdev.Name]units.Bytes{vdev.NameOf(gpuA, 1): units.Bytes(round)}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	views := w.Views()
	for n, m := range views {
		got, _ := read(t, w, n)
		if got != m {
			t.Errorf("%s: the file says %+v, the Writer %+v", n, got, m)
		}
	}
	if len(views) != 3 {
		t.Errorf("views %v; want both slices and the last claim", views)
	}
}
