//go:build cgo

package nvmlsim

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func readTrimmed(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// checkTree checks the fake tree as pkg/gpu's resolver and NUMA reader walk
// it: render node -> PCI dir, by-path link -> render node, numa_node.
func checkTree(t *testing.T, h *Host, vendorDevice string) {
	t.Helper()
	gpus := h.GPUs()
	for i, g := range gpus {
		addr := g.PCI.String()
		pciDir, err := filepath.EvalSymlinks(filepath.Join(h.SysfsRoot(), "bus", "pci", "devices", addr))
		if err != nil {
			t.Fatal(err)
		}
		render := fmt.Sprintf("renderD%d", 128+i)
		got, err := filepath.EvalSymlinks(filepath.Join(h.SysfsRoot(), "class", "drm", render, "device"))
		if err != nil {
			t.Fatalf("GPU %d: %v", i, err)
		}
		if got != pciDir {
			t.Errorf("%s/device resolves to %s, want %s", render, got, pciDir)
		}
		node, err := filepath.EvalSymlinks(filepath.Join(h.DevRoot(), "dri", "by-path", "pci-"+addr+"-render"))
		if err != nil {
			t.Fatalf("GPU %d: %v", i, err)
		}
		if want, _ := filepath.EvalSymlinks(filepath.Join(h.DevRoot(), "dri", render)); node != want || want == "" {
			t.Errorf("by-path link of %s resolves to %s, want %s", addr, node, want)
		}
		wantNode := "0"
		if 2*i >= len(gpus) {
			wantNode = "1"
		}
		if n := readTrimmed(t, filepath.Join(pciDir, "numa_node")); n != wantNode {
			t.Errorf("GPU %d numa_node = %s, want %s", i, n, wantNode)
		}
		vd := readTrimmed(t, filepath.Join(pciDir, "vendor")) + ":" + readTrimmed(t, filepath.Join(pciDir, "device"))
		if vd != vendorDevice {
			t.Errorf("GPU %d vendor:device = %s, want %s", i, vd, vendorDevice)
		}
		checkNode(t, filepath.Join(h.DevRoot(), fmt.Sprintf("nvidia%d", g.Minor)))
	}
	for _, n := range simControlNodes {
		checkNode(t, filepath.Join(h.DevRoot(), n))
	}
}

// checkNode: a stand-in character device (/dev/null's 1:3) where mknod is
// allowed (root), else a plain file; never anything that could reach a GPU.
func checkNode(t *testing.T, p string) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Errorf("%s: %v", p, err)
		return
	}
	if os.Geteuid() == 0 {
		if !isStandIn(st) {
			t.Errorf("%s: mode %#o rdev %d:%d, want a character device 1:3 (running as root)", p, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
	} else if st.Mode&unix.S_IFMT != unix.S_IFREG {
		t.Errorf("%s: mode %#o, want a regular file", p, st.Mode)
	}
}

func TestSimTree(t *testing.T) {
	_, h := newSim(t, "8xH100")
	checkTree(t, h, "0x10de:0x2330")
}

func TestSimTreeOverItself(t *testing.T) {
	root := t.TempDir()
	// A stale link, as a crashed earlier run might leave, is replaced.
	byPath := filepath.Join(root, "dev", "dri", "by-path")
	if err := os.MkdirAll(byPath, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../renderD999", filepath.Join(byPath, "pci-0000:18:00.0-render")); err != nil {
		t.Fatal(err)
	}
	for _, profile := range []string{"8xH100", "8xH100", "2xP40"} {
		a, h, err := New(profile, root, nil)
		if err != nil {
			t.Fatalf("New(%s) over %s: %v", profile, root, err)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		want := "0x10de:0x2330"
		if profile == "2xP40" {
			want = "0x10de:0x1b38"
		}
		checkTree(t, h, want)
	}
	// 2xP40 over 8xH100: the six GPUs that went are gone from the tree.
	for _, gone := range []string{
		"sys/class/drm/renderD130", "sys/bus/pci/devices/0000:3a:00.0", "dev/dri/renderD135",
		"dev/dri/by-path/pci-0000:db:00.0-render", "dev/nvidia2",
	} {
		if _, err := os.Lstat(filepath.Join(root, gone)); !os.IsNotExist(err) {
			t.Errorf("%s still there after a smaller profile (%v)", gone, err)
		}
	}
}

func TestSimTreeRefusesWhatIsNotOurs(t *testing.T) {
	t.Run("root /", func(t *testing.T) {
		if err := writeSimTree("/", []treeGPU{{addr: simAddress(0)}}); err == nil {
			t.Fatal("writeSimTree accepted /")
		}
	})
	t.Run("a real device node where a stand-in goes", func(t *testing.T) {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(filepath.Join(root, "dev", "nvidiactl"), unix.S_IFCHR|0o666, int(unix.Mkdev(195, 255))); err != nil {
			t.Skipf("mknod: %v", err)
		}
		_, _, err := New("1xH100", root, nil)
		if err == nil || !strings.Contains(err.Error(), "nvidiactl") {
			t.Fatalf("New over a real /dev/nvidiactl node: %v", err)
		}
	})
	t.Run("directory where a device file goes", func(t *testing.T) {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "dev", "nvidia0"), 0o755); err != nil {
			t.Fatal(err)
		}
		_, _, err := New("1xH100", root, nil)
		if err == nil || !strings.Contains(err.Error(), "nvidia0") {
			t.Fatalf("New over a directory dev/nvidia0: %v", err)
		}
	})
}
