package mps

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// The privileged socket out of the tenants' reach (issue 45).
//
// A control daemon takes its own settings (set_default_*) and quit only
// through control_privileged, a socket it makes in its pipe directory
// beside `control`. Cloudpods' host agent mounts the pipe root into its
// pods read-write, and root in a pod is root: through control_privileged
// it could quit the control daemon (every client of the GPUs it serves
// dies) or raise every device's defaults. Measured on an H200, driver
// 580.159.04 (docs/gpu-runs/probe-privileged-2026-11-29.txt): with the
// socket renamed into another directory of the same file system,
//
//   - root through the pipe directory: quit answers "Not enough privilege
//     to execute quit command" and set_default_* "Insufficient privileges
//     for UID 0. ..." (exit status 0 both), and the daemon keeps running;
//     questions (get_*) are answered; CUDA clients are served, and servers
//     start, as before;
//   - through a directory holding the moved socket and links to the pipe
//     directory's control, control_lock, nvidia-cuda-mps-control.pid and
//     log, every command works: quit and set_default_* included.
//
// So the Guard renames control_privileged into a private directory (0700,
// the daemon's), the one every command of this daemon goes through, and
// leaves a dead socket of mode 0000 (a placeholder) under the old name:
// CDI entries bind-mount /dev/null over that path, which must exist when a
// container is created, and a client connecting there is refused as at the
// mask, or at a socket left by a control daemon that was killed. The
// rename and the placeholder are one renameat2(RENAME_EXCHANGE), so the
// path never goes missing; a file system without it gets a rename and
// then the placeholder.

// PrivilegedSocket is the name of a control daemon's privileged socket.
const PrivilegedSocket = "control_privileged"

// linked are the files of the pipe directory the control client needs
// besides the privileged socket: the private directory links to them.
var linked = []string{"control", "control_lock", pidFileName, "log"}

const pidFileName = "nvidia-cuda-mps-control.pid"

// PrivilegedRoot is where the private directories of the control daemons
// whose pipe root is pipeRoot live: a sibling of the pipe root (renames
// work only within a file system, and a pod that mounts the pipe root
// does not reach its siblings), `<pipe root>.privileged`. The single
// layout's daemon has the root itself, a per-GPU daemon <root>/<uuid>.
func PrivilegedRoot(pipeRoot string) string {
	return filepath.Clean(pipeRoot) + ".privileged"
}

// placeholderPerm is the placeholder's mode: a socket the daemon's own
// never has (srwxr-xr-x), so that a new control daemon's socket beside it
// is told apart.
const placeholderPerm = 0

// isSocket reports whether fi is a socket; placeholder whether it is one
// of ours.
func isSocket(fi fs.FileInfo) bool    { return fi.Mode().Type() == fs.ModeSocket }
func placeholder(fi fs.FileInfo) bool { return isSocket(fi) && fi.Mode().Perm() == placeholderPerm }

// makePlaceholder makes a dead socket of mode 0000 at path, replacing what
// is there in one rename.
func makePlaceholder(path string) error {
	tmp := path + ".new"
	_ = os.Remove(tmp)
	// Mode 0000 whatever the umask: it only takes bits away.
	if err := unix.Mknod(tmp, unix.S_IFSOCK|placeholderPerm, 0); err != nil {
		return fmt.Errorf("making a placeholder at %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("placing the placeholder at %s: %w", path, err)
	}
	return nil
}

// exchange swaps two paths atomically; a file system without
// RENAME_EXCHANGE gets rename(old, new) and a placeholder at old.
func exchange(old, new string) error {
	err := unix.Renameat2(unix.AT_FDCWD, old, unix.AT_FDCWD, new, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		if err := os.Rename(old, new); err != nil {
			return err
		}
		return makePlaceholder(old)
	}
	if err != nil {
		return &os.LinkError{Op: "renameat2", Old: old, New: new, Err: err}
	}
	return nil
}

// listening reports whether a process listens on the unix socket at path
// (a connect that is refused: none). A connection made is closed at once;
// a control daemon logs it and waits for the next.
func listening(path string) bool {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return true // cannot tell: the socket there is kept
	}
	defer unix.Close(fd)
	err = unix.Connect(fd, &unix.SockaddrUnix{Name: path})
	return !(errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT))
}

// privateDir makes dir the daemon's own directory: created where missing
// (its missing parents 0700 too), a real directory of this user (never a
// link), 0700. Its parent is left as it is: what is inside dir is out of
// reach whatever the parent allows.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating the private directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("checking the private directory: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("private directory %s is not a directory (%s)", dir, fi.Mode().Type())
	case ok && int(st.Uid) != os.Geteuid():
		return fmt.Errorf("private directory %s belongs to UID %d, not to this daemon's %d", dir, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("making %s private (0700): %w", dir, err)
		}
	}
	return nil
}

// links makes dir's links to the pipe directory's files the control client
// needs (linked), replacing any that point elsewhere.
func links(dir, pipeDir string) error {
	for _, name := range linked {
		link, target := filepath.Join(dir, name), filepath.Join(pipeDir, name)
		if got, err := os.Readlink(link); err == nil && got == target {
			continue
		}
		if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("replacing %s: %w", link, err)
		}
		if err := os.Symlink(target, link); err != nil {
			return fmt.Errorf("linking %s: %w", link, err)
		}
	}
	return nil
}
