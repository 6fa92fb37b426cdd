// Package view is the host side of the view: what makes a virtual device
// look like a GPU of its own to the software in its containers. The
// library libyunion-mps-view.so (tenant/, loaded in every process of the
// container through /etc/ld.so.preload) answers CUDA's and NVML's
// questions about the GPU's memory with what the device's view file says:
// total_bytes, the device's cap, and used_bytes, what all its processes
// hold. This package writes those files, one directory per virtual device
// (and per Kubernetes claim) under <state directory>/view, and the
// preload file the containers get as their /etc/ld.so.preload; pkg/cdi
// mounts them (docs/containers.md, "What software in a slice sees").
//
// The view changes only what software is told. The caps stay where they
// are, outside the container: MPS's limits and the accounting. A process
// that drops the library gains nothing but a wrong idea of its GPU.
package view

import (
	"errors"
	"fmt"
	"math"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// Where a container finds the view (the contract with tenant/,
// docs/containers.md).
const (
	// LibraryFile is the library's file name: on the host, in the
	// container, and in /proc/<pid>/maps of a process that loaded it.
	LibraryFile = "libyunion-mps-view.so"
	// ContainerLibrary is where the library is mounted in a container
	// (read-only, without noexec: a library must be mapped executable).
	ContainerLibrary = "/run/yunion-mps/lib/" + LibraryFile
	// ContainerPlatforms is where the Store's platform directory
	// (PlatformsDir) is mounted in a container, read-only: the preload
	// list names the library through it (platform.go says why).
	ContainerPlatforms = "/run/yunion-mps/lib/p"
	// ContainerPreload is the container's preload list, a read-only bind
	// mount of the host's PreloadFile: every dynamically linked glibc
	// process loads what it names, whatever its environment.
	ContainerPreload = "/etc/ld.so.preload"
	// ContainerRoot holds a directory per GPU of the container's devices
	// (ContainerDir).
	ContainerRoot = "/run/yunion-mps/view"
	// MemoryFile is the view file in a device's directory.
	MemoryFile = "memory"
	// PreloadFile is the preload list's name in the Store's directory.
	PreloadFile = "ld.so.preload"
	// PlatformsDir is the platform directory's name in the Store's
	// directory.
	PlatformsDir = "platforms"
	// MaxFileBytes is the most the library reads of a view file.
	MaxFileBytes = 4096
)

// ContainerDir is where a container given a device of GPU gpuUUID finds
// its view: the directory of that one device, read-only.
func ContainerDir(gpuUUID gpu.UUID) string { return path.Join(ContainerRoot, string(gpuUUID)) }

// PreloadContent is the preload list: the library's name through the
// platform directory, which glibc's loader expands for the process's
// platform ($PLATFORM), and a newline.
func PreloadContent() []byte {
	return []byte(ContainerPlatforms + "/$PLATFORM/" + LibraryFile + "\n")
}

// Memory is what a device's view file says.
type Memory struct {
	// Total is the device's cap (a claim's size): what the library
	// answers as the GPU's total memory.
	Total units.Bytes
	// Used is what all the device's processes hold, as the accounting
	// last measured it (0 when none or not measured).
	Used units.Bytes
}

// The view file's keys.
const (
	keyTotal = "total_bytes"
	keyUsed  = "used_bytes"
)

// ErrInvalid marks a view that must not reach a container: a cap of 0, or
// one that bytes cannot hold.
var ErrInvalid = errors.New("invalid view")

// maxCap is the largest cap in MiB whose size in bytes a uint64 holds.
const maxCap = units.MiB(math.MaxUint64 >> 20)

// TotalOf is a cap in bytes; a cap of 0 or less, or one too large for
// bytes to hold, is an error wrapping ErrInvalid: the library would pass
// a total of 0 through, and an overflowed one would be a lie.
func TotalOf(limit units.MiB) (units.Bytes, error) {
	if limit <= 0 || limit > maxCap {
		return 0, fmt.Errorf("%w: a cap of %d MiB", ErrInvalid, limit)
	}
	return limit.Bytes(), nil
}

// Content is the view file's bytes: "total_bytes N" and "used_bytes N"
// lines. A total of 0 is an error wrapping ErrInvalid.
func Content(m Memory) ([]byte, error) {
	if m.Total == 0 {
		return nil, fmt.Errorf("%w: a total of 0 bytes", ErrInvalid)
	}
	b := make([]byte, 0, 64)
	b = append(b, keyTotal+" "...)
	b = strconv.AppendUint(b, uint64(m.Total), 10)
	b = append(b, "\n"+keyUsed+" "...)
	b = strconv.AppendUint(b, uint64(m.Used), 10)
	return append(b, '\n'), nil
}

// Parse reads a view file exactly as the library does (tenant/viewfile.c;
// both are tested against one table of cases, tenant/test/viewfiles.txt):
// at most MaxFileBytes, ending with a newline, no NUL byte; lines of a key
// and a value separated by spaces or tabs, blank lines ignored, keys in
// any order, unknown keys ignored; total_bytes (required, not 0) and
// used_bytes (0 when absent) decimal numbers of 64 bits, each at most
// once. Anything else is an error naming the line: the library would give
// the real answers.
func Parse(b []byte) (Memory, error) {
	switch {
	case len(b) > MaxFileBytes:
		return Memory{}, fmt.Errorf("view file of %d bytes, more than %d", len(b), MaxFileBytes)
	case len(b) == 0:
		return Memory{}, errors.New("view file: empty")
	case b[len(b)-1] != '\n':
		return Memory{}, errors.New("view file: the last line has no newline")
	}
	var m Memory
	seen := map[string]bool{}
	for i, line := range strings.Split(string(b[:len(b)-1]), "\n") {
		if line == "" {
			continue
		}
		if strings.IndexByte(line, 0) >= 0 {
			return Memory{}, fmt.Errorf("view file, line %d: a NUL byte", i+1)
		}
		k := strings.IndexAny(line, " \t")
		if k <= 0 {
			return Memory{}, fmt.Errorf("view file, line %d: %q is not a key and a value", i+1, line)
		}
		key, value := line[:k], strings.Trim(line[k:], " \t")
		var dst *units.Bytes
		switch key {
		case keyTotal:
			dst = &m.Total
		case keyUsed:
			dst = &m.Used
		default:
			continue
		}
		if seen[key] {
			return Memory{}, fmt.Errorf("view file, line %d: %s given twice", i+1, key)
		}
		seen[key] = true
		n, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("view file, line %d: %s %q is not a decimal number of 64 bits", i+1, key, value)
		}
		*dst = units.Bytes(n)
	}
	if m.Total == 0 {
		return Memory{}, fmt.Errorf("view file: no %s, or 0", keyTotal)
	}
	return m, nil
}

// Store is the host's directory of views (<state directory>/view): a
// directory per virtual device, and the preload list.
type Store struct{ Dir string }

// Path is the host directory of device name's view, the source of its CDI
// bind mount: "<GPU UUID>.<i>", as identity files are named (no colon).
func (s Store) Path(name vdev.Name) (string, error) {
	d, err := dirName(name)
	if err != nil {
		return "", err
	}
	return filepath.Join(s.Dir, d), nil
}

// PreloadPath is the host file mounted over a container's
// /etc/ld.so.preload.
func (s Store) PreloadPath() string { return filepath.Join(s.Dir, PreloadFile) }

// PlatformsPath is the host directory mounted at a container's
// ContainerPlatforms.
func (s Store) PlatformsPath() string { return filepath.Join(s.Dir, PlatformsDir) }

// dirName is a device's directory name; a name unfit for one (a GPU UUID
// with a slash, "." or "..") is an error wrapping vdev.ErrBadName.
func dirName(name vdev.Name) (string, error) {
	uuid, i, err := vdev.ParseName(string(name))
	if err != nil {
		return "", fmt.Errorf("view of %q: %w", name, err)
	}
	if uuid == "." || uuid == ".." || strings.ContainsAny(string(uuid), "/\x00") {
		return "", fmt.Errorf("view of %q: %w", name, vdev.ErrBadName)
	}
	return string(uuid) + "." + strconv.Itoa(i), nil
}

// nameOf reverses dirName; ok false for anything else in the directory.
func nameOf(dir string) (vdev.Name, bool) {
	k := strings.LastIndexByte(dir, '.')
	if k <= 0 {
		return "", false
	}
	i, err := strconv.Atoi(dir[k+1:])
	if err != nil || i < 0 || strconv.Itoa(i) != dir[k+1:] {
		return "", false
	}
	name := vdev.NameOf(gpu.UUID(dir[:k]), i)
	if d, err := dirName(name); err != nil || d != dir {
		return "", false
	}
	return name, true
}
