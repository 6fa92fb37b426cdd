//go:build cgo

package nvmlsim

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"yunion.io/x/mps-daemon/pkg/pci"
)

// treeGPU is what the fake tree needs of a simulated GPU.
type treeGPU struct {
	// slot (the place in PCI order) numbers the render node, minor the
	// /dev/nvidiaN node.
	slot     int
	minor    int
	addr     pci.Address
	numaNode int
	vendorID uint16
	deviceID uint16
}

// writeSimTree writes, under root, the parts of sysfs and /dev the daemon
// reads on a real host, for the GPU at PCI address A, the i-th in PCI order,
// with device minor M:
//
//	sys/bus/pci/devices/A/{numa_node,vendor,device}
//	sys/class/drm/renderD<128+i>/device -> ../../../bus/pci/devices/A
//	dev/dri/renderD<128+i>                (empty file for the char device)
//	dev/dri/by-path/pci-A-render -> ../renderD<128+i>
//	dev/nvidia<M>                         (a stand-in node, see writeNode)
//
// and, once for the host, the driver's control nodes dev/nvidiactl,
// dev/nvidia-uvm and dev/nvidia-uvm-tools (stand-ins too).
//
// It can run over its own earlier output: files are rewritten, links replaced,
// and the entries of GPUs beyond len(gpus) (left by a larger profile) removed.
// It refuses "/" and anything it did not make, such as a real device node, so
// a wrong root cannot damage a host.
func writeSimTree(root string, gpus []treeGPU) error {
	root = filepath.Clean(root)
	if root == string(filepath.Separator) || !filepath.IsAbs(root) {
		return fmt.Errorf("writing simulated tree: refusing root %q: want an absolute directory other than /", root)
	}
	sys, dev := filepath.Join(root, "sys"), filepath.Join(root, "dev")
	for _, d := range []string{filepath.Join(sys, "bus", "pci", "devices"), filepath.Join(sys, "class", "drm"), filepath.Join(dev, "dri", "by-path")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("writing simulated tree: %w", err)
		}
	}
	for _, n := range simControlNodes {
		if err := writeNode(filepath.Join(dev, n)); err != nil {
			return fmt.Errorf("writing simulated tree: %w", err)
		}
	}
	for _, g := range gpus {
		if err := writeTreeGPU(sys, dev, g); err != nil {
			return fmt.Errorf("writing simulated tree for GPU %d (%s): %w", g.slot, g.addr, err)
		}
	}
	for i := len(gpus); i < maxSimGPUs; i++ {
		if err := removeTreeGPU(sys, dev, i, simAddress(i)); err != nil {
			return fmt.Errorf("removing stale simulated GPU %d from the tree: %w", i, err)
		}
	}
	return nil
}

func writeTreeGPU(sys, dev string, g treeGPU) error {
	addr := g.addr.String()
	render := "renderD" + strconv.Itoa(128+g.slot)
	pciDir := filepath.Join(sys, "bus", "pci", "devices", addr)
	drmDir := filepath.Join(sys, "class", "drm", render)
	for _, d := range []string{pciDir, drmDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	files := []struct{ name, content string }{
		{filepath.Join(pciDir, "numa_node"), fmt.Sprintf("%d\n", g.numaNode)},
		{filepath.Join(pciDir, "vendor"), fmt.Sprintf("0x%04x\n", g.vendorID)},
		{filepath.Join(pciDir, "device"), fmt.Sprintf("0x%04x\n", g.deviceID)},
		{filepath.Join(dev, "dri", render), ""},
	}
	for _, f := range files {
		if err := writeRegular(f.name, f.content); err != nil {
			return err
		}
	}
	if err := writeNode(filepath.Join(dev, "nvidia"+strconv.Itoa(g.minor))); err != nil {
		return err
	}
	if err := replaceSymlink(filepath.Join("..", "..", "..", "bus", "pci", "devices", addr), filepath.Join(drmDir, "device")); err != nil {
		return err
	}
	return replaceSymlink(filepath.Join("..", render), filepath.Join(dev, "dri", "by-path", "pci-"+addr+"-render"))
}

// removeTreeGPU removes what writeTreeGPU would have written for GPU i, and
// only that.
func removeTreeGPU(sys, dev string, i int, a pci.Address) error {
	addr := a.String()
	render := "renderD" + strconv.Itoa(128+i)
	pciDir := filepath.Join(sys, "bus", "pci", "devices", addr)
	drmDir := filepath.Join(sys, "class", "drm", render)
	for _, p := range []string{
		filepath.Join(dev, "dri", "by-path", "pci-"+addr+"-render"),
		filepath.Join(drmDir, "device"),
		filepath.Join(dev, "dri", render),
		filepath.Join(dev, "nvidia"+strconv.Itoa(i)),
		filepath.Join(pciDir, "numa_node"),
		filepath.Join(pciDir, "vendor"),
		filepath.Join(pciDir, "device"),
		drmDir,
		pciDir,
	} {
		if err := removeOwn(p); err != nil {
			return err
		}
	}
	return nil
}

// simControlNodes are the driver's nodes besides /dev/nvidiaN.
var simControlNodes = []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}

// standInDev is /dev/null's device number (1:3): what the simulated host's
// NVIDIA nodes are, so a container runtime can inject them as it injects the
// real ones (type and numbers read from the host's node) while a container
// given one opens nothing but a null device, never a real GPU.
var standInDev = unix.Mkdev(1, 3)

// writeNode makes a stand-in character device (1:3) at name where this
// process may (root; mknod works in any directory not mounted nodev for
// opening, and creating needs no more), else an empty regular file as
// before. An existing stand-in or regular file is kept or upgraded;
// anything else (a real node under a mistaken root) is refused.
func writeNode(name string) error {
	var st unix.Stat_t
	err := unix.Lstat(name, &st)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case isStandIn(st):
		return nil
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("%s exists and is neither a regular file nor a stand-in node (1:3): not ours to replace", name)
	default:
		tmp := name + ".node"
		_ = os.Remove(tmp)
		if unix.Mknod(tmp, unix.S_IFCHR|0o666, int(standInDev)) != nil {
			return nil // keep the plain file
		}
		return os.Rename(tmp, name)
	}
	if err := unix.Mknod(name, unix.S_IFCHR|0o666, int(standInDev)); err != nil {
		return writeRegular(name, "")
	}
	return nil
}

func isStandIn(st unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && uint64(st.Rdev) == standInDev
}

// writeRegular writes a regular file, refusing to write through anything
// else (a real device node under a mistaken root).
func writeRegular(name, content string) error {
	if fi, err := os.Lstat(name); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("%s exists and is not a regular file: not ours to overwrite", name)
	}
	return os.WriteFile(name, []byte(content), 0o644)
}

// replaceSymlink points link at target, atomically replacing an older link.
func replaceSymlink(target, link string) error {
	fi, err := os.Lstat(link)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case fi.Mode()&fs.ModeSymlink == 0:
		return fmt.Errorf("%s exists and is not a symlink: not ours to replace", link)
	default:
		if old, err := os.Readlink(link); err == nil && old == target {
			return nil
		}
	}
	tmp := link + ".tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, link); err != nil {
		return errors.Join(err, os.Remove(tmp))
	}
	return nil
}

// removeOwn removes a symlink, a regular file or an empty directory; a
// directory still holding something we did not write is left with an error.
func removeOwn(p string) error {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var st unix.Stat_t
	if m := fi.Mode(); !m.IsRegular() && !m.IsDir() && m&fs.ModeSymlink == 0 && (unix.Lstat(p, &st) != nil || !isStandIn(st)) {
		return fmt.Errorf("%s is not a file, directory, symlink or stand-in node: not ours to remove", p)
	}
	return os.Remove(p)
}
