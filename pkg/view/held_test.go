package view

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/vdev"
)

func TestMountinfoRootsAreFound(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mountinfo")
	suffixes := map[string]string{"a": "/view/GPU-a.1", "b": "/view/GPU-b.2", "c": "/view/GPU-c.3", "d": "/view/GPU-d.4"}
	long := strings.Repeat("x", 3*mountinfoBuf)
	content := "" +
		"1 0 8:1 / / rw - ext4 /dev/sda1 rw\n" +
		// a: the state directory on its own file system.
		"700 1 8:1 /lib/yunion-mps/view/GPU-a.1 /run/yunion-mps/view/GPU-a ro - ext4 /dev/sda1 rw\n" +
		// b: removed on the host while the container holds it.
		"701 1 8:1 /var/lib/yunion-mps/view/GPU-b.2//deleted /run/yunion-mps/view/GPU-b ro - ext4 /dev/sda1 rw\n" +
		// A line longer than the buffer that ends in c's name: not read
		// as a mount of c.
		"702 1 8:1 /" + long + "/view/GPU-c.3 /x ro - ext4 /dev/sda1 rw\n" +
		// d: under a state directory whose name has a space.
		"703 1 8:1 /my\\040state/view/GPU-d.4 /run/yunion-mps/view/GPU-d ro - ext4 /dev/sda1 rw\n" +
		"garbage\n"
	if err := os.WriteFile(file, []byte(content), 0o444); err != nil {
		t.Fatal(err)
	}
	held := map[string]bool{}
	if err := scanMountinfo(file, suffixes, held); err != nil {
		t.Fatal(err)
	}
	if !held["a"] || !held["b"] || held["c"] || !held["d"] {
		t.Errorf("held %v; want a, b and d", held)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"+strings.Repeat("y", maxMountinfo)), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := scanMountinfo(big, suffixes, held); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a mountinfo over the bound: %v", err)
	}
	if err := os.Symlink(file, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := scanMountinfo(filepath.Join(dir, "link"), suffixes, map[string]bool{}); err == nil {
		t.Error("a link was followed")
	}
}

// A real container's hold: a process in a mount namespace of its own with
// the view's directory bind-mounted, as a runtime mounts it. Its view
// stays until the process ends.
func TestAViewAMountNamespaceHoldsIsKept(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a mount namespace with a bind mount")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare")
	}
	w := NewWriter(Store{Dir: filepath.Join(t.TempDir(), "view")}, "/proc")
	a0, a1 := vdev.NameOf(gpuA, 0), vdev.NameOf(gpuA, 1)
	if err := syncViews(t, w, ownSlices, []Device{{a0, 1}, {a1, 1}}); err != nil {
		t.Fatal(err)
	}
	dir1, _ := w.Store().Path(a1)
	target := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount --bind -o ro "$1" "$2" && echo mounted && { read x || true; }`, "sh", dir1, target)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	defer stdin.Close()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "mounted\n" {
		t.Fatalf("the holder did not mount: %q, %v", line, err)
	}
	if err := syncViews(t, w, ownSlices, []Device{{a0, 1}}); err != nil {
		t.Fatal(err)
	}
	if !exists(t, w, a1) {
		t.Fatal("a view a mount namespace holds was removed")
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := syncViews(t, w, ownSlices, []Device{{a0, 1}}); err != nil {
		t.Fatal(err)
	}
	if exists(t, w, a1) {
		t.Error("the view outlived its holder")
	}
}

// A process whose mount namespace cannot be named (readlink refused: a
// sandbox's init, seen on this CI machine) has its own mounts read; one
// whose mounts cannot be read either makes the whole answer unknown.
func TestHoldersWhoseNamespaceCannotBeNamed(t *testing.T) {
	proc := t.TempDir()
	store := "/var/lib/yunion-mps/view"
	mk := func(pid string, mountinfo string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(proc, pid, "ns"), 0o755); err != nil {
			t.Fatal(err)
		}
		// A plain file where the link goes: readlink fails (EINVAL).
		if err := os.WriteFile(filepath.Join(proc, pid, "ns", "mnt"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if mountinfo != "" {
			if err := os.WriteFile(filepath.Join(proc, pid, "mountinfo"), []byte(mountinfo), 0o444); err != nil {
				t.Fatal(err)
			}
		} else if err := os.Mkdir(filepath.Join(proc, pid, "mountinfo"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mk("1", "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n")
	mk("77", "9 1 8:1 /var/lib/yunion-mps/view/GPU-a.2 /run/yunion-mps/view/GPU-a ro - ext4 /dev/sda1 rw\n")
	held, err := heldDirs(proc, store, []string{"GPU-a.1", "GPU-a.2"})
	if err != nil || held["GPU-a.1"] || !held["GPU-a.2"] {
		t.Errorf("held %v, %v; want GPU-a.2 alone", held, err)
	}
	mk("78", "")
	if held, err := heldDirs(proc, store, []string{"GPU-a.1"}); err == nil {
		t.Errorf("a process whose mounts cannot be read: %v, no error", held)
	}
}
