package view

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"yunion.io/x/mps-daemon/pkg/vdev"
)

// Bounds on what is read of /proc to find the views containers hold: a
// container controls how many mounts it has, and nothing here may cost
// more than a bounded read.
const (
	maxMountinfo     = 16 << 20
	mountinfoBuf     = 64 << 10
	maxNamespaceRead = 4096
)

// prune removes the directories of the devices candidate picks (not
// wanted by their owner), except those a container holds. Nothing is
// removed when the mounts cannot all be read: a directory is only ever
// removed when no container can hold it.
func (w *Writer) prune(candidate func(vdev.Name) bool) Pruned {
	entries, err := os.ReadDir(w.store.Dir)
	if err != nil {
		return Pruned{Err: fmt.Errorf("listing views: %w", err)}
	}
	var gone []string
	for _, e := range entries {
		if n, ok := nameOf(e.Name()); ok && e.IsDir() && candidate(n) {
			gone = append(gone, e.Name())
		}
	}
	if len(gone) == 0 {
		return Pruned{}
	}
	held, err := heldDirs(w.procRoot, w.store.Dir, gone)
	if err != nil {
		return Pruned{Held: len(gone), Err: fmt.Errorf("views of devices that are gone kept: %w", err)}
	}
	var p Pruned
	var errs []error
	for _, d := range gone {
		if held[d] {
			p.Held++
			continue
		}
		if err := os.RemoveAll(filepath.Join(w.store.Dir, d)); err != nil {
			errs = append(errs, fmt.Errorf("removing a view of a device that is gone: %w", err))
			continue
		}
		p.Removed++
		n, _ := nameOf(d)
		delete(w.views, n)
	}
	p.Err = errors.Join(errs...)
	return p
}

// heldDirs says which of the Store's directories dirs (their names) some
// mount namespace has a mount of: a container started with the device
// holds its view, as a bind mount whose root (mountinfo's fourth field)
// is the directory, followed by "//deleted" once it is removed. Each
// namespace's mountinfo is read once, through the first of its processes
// that can be read; a namespace none of whose processes can be read is an
// error (the caller then removes nothing).
func heldDirs(procRoot, storeDir string, dirs []string) (map[string]bool, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	d, err := os.Open(procRoot)
	if err != nil {
		return nil, fmt.Errorf("reading mounts: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("reading mounts: %w", err)
	}
	var pids []int
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	suffixes := make(map[string]string, len(dirs))
	for _, dir := range dirs {
		suffixes[dir] = "/" + filepath.Base(storeDir) + "/" + dir
	}
	held := map[string]bool{}
	read := map[string]bool{}    // namespaces whose mounts were read
	failed := map[string]error{} // namespaces not read yet, and why
	for _, pid := range pids {
		p := filepath.Join(procRoot, strconv.Itoa(pid))
		ns, err := readNamespace(filepath.Join(p, "ns", "mnt"))
		switch {
		case err != nil && gone(err):
			continue // exited meanwhile
		case err != nil:
			// Its namespace cannot be named (a sandbox's init, a daemon
			// that is not root): its own mounts are read instead.
			ns = "PID " + strconv.Itoa(pid)
		case read[ns]:
			continue
		}
		if err := scanMountinfo(filepath.Join(p, "mountinfo"), suffixes, held); err != nil {
			if !gone(err) {
				failed[ns] = fmt.Errorf("PID %d: %w", pid, err)
			}
			continue
		}
		read[ns] = true
		delete(failed, ns)
	}
	var errs []error
	for _, err := range failed {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("reading mounts: %w", errors.Join(errs...))
	}
	return held, nil
}

// gone: the process went away while it was read.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

func readNamespace(link string) (string, error) {
	buf := make([]byte, maxNamespaceRead)
	n, err := syscall.Readlink(link, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// scanMountinfo reads one mountinfo as a stream, at most maxMountinfo
// bytes, never following a link, and marks in held the directories whose
// suffix some mount's root ends with.
func scanMountinfo(path string, suffixes map[string]string, held map[string]bool) error {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReaderSize(io.LimitReader(f, maxMountinfo+1), mountinfoBuf)
	var total int
	for {
		line, err := br.ReadSlice('\n')
		total += len(line)
		if total > maxMountinfo {
			return fmt.Errorf("%s is larger than %d bytes", path, maxMountinfo)
		}
		long := errors.Is(err, bufio.ErrBufferFull)
		if err != nil && err != io.EOF && !long {
			return err
		}
		if root, ok := mountRoot(line); ok && !long {
			for dir, suffix := range suffixes {
				if bytes.HasSuffix(root, []byte(suffix)) || bytes.HasSuffix(root, []byte(suffix+"//deleted")) {
					held[dir] = true
				}
			}
		}
		for long {
			// The rest of a line longer than the buffer: no mount of
			// ours (a view's root is short), counted, not kept.
			line, err = br.ReadSlice('\n')
			total += len(line)
			if total > maxMountinfo {
				return fmt.Errorf("%s is larger than %d bytes", path, maxMountinfo)
			}
			long = errors.Is(err, bufio.ErrBufferFull)
			if err != nil && err != io.EOF && !long {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
	}
}

// mountRoot is the root field (the fourth) of a mountinfo line, its octal
// escapes (\040 for a space) undone.
func mountRoot(line []byte) ([]byte, bool) {
	fields := bytes.Fields(line)
	if len(fields) < 5 {
		return nil, false
	}
	return unescape(fields[3]), true
}

// unescape undoes the kernel's octal escapes of space, tab, newline and
// backslash in mountinfo's paths.
func unescape(b []byte) []byte {
	if bytes.IndexByte(b, '\\') < 0 {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] == '\\' && i+3 < len(b) {
			if v, err := strconv.ParseUint(string(b[i+1:i+4]), 8, 8); err == nil {
				out = append(out, byte(v))
				i += 3
				continue
			}
		}
		out = append(out, b[i])
	}
	return out
}
