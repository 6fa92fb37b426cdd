package identity

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// ErrNotFound: no identity file of the GPU is reachable in the process's
// mount namespace.
var ErrNotFound = errors.New("no identity file")

// maxLevels is how many directories above a process's root are searched
// one by one; above that, the climb jumps (jump) to the root of the mount
// namespace and searches there only, so a process chroot()ed deep down a
// directory tree of its own making costs a bounded number of calls.
const (
	maxLevels = 64
	// jumpDepth ".." components per call stay within PATH_MAX (4096);
	// maxJumps of them bound a tree a tenant could make deeper still.
	jumpDepth = 1024
	maxJumps  = 1024
)

// Find names the virtual device of GPU gpuUUID whose identity file is
// mounted in the mount namespace of a process; procDir is that process's
// /proc/<pid> directory, open (so a PID reused meanwhile cannot be read in
// its place: every file is opened relative to it).
//
// It looks for ContainerPath(gpuUUID) under the process's root and then, one
// ".." at a time, under each directory above it up to the root of its mount
// namespace: a process that chroot()ed away from its container's root (root
// in a container may) still finds its container's file. ".." is resolved
// from the process's mount tree, never past the top of its namespace.
//
// Each path component is opened with O_PATH and O_NOFOLLOW, a directory
// with O_DIRECTORY: a symbolic link anywhere on the way is not followed, and
// no file is opened for reading. The file is accepted when it is a regular
// file whose device and inode are in t and whose device is of this GPU.
// Anything else at that path (a copy, a link, a FIFO, a device node, a file
// of another GPU's device) is a decoy: skipped, described in the second
// result, and the climb goes on. ErrNotFound when nothing was accepted.
func Find(procDir int, gpuUUID gpu.UUID, t Table) (name, decoy string, err error) {
	if !validName(string(vdev.NameOf(gpuUUID, 0))) {
		return "", "", fmt.Errorf("finding identity file: GPU UUID %q: %w", gpuUUID, vdev.ErrBadName)
	}
	rel := strings.Split(strings.TrimPrefix(ContainerPath(gpuUUID), "/"), "/")
	dir, err := unix.Openat(procDir, "root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", "", fmt.Errorf("opening the process's root: %w", err)
	}
	defer func() { unix.Close(dir) }()
	here, err := where(dir)
	if err != nil {
		return "", "", err
	}
	for level := 0; ; level++ {
		n, d, err := lookAt(dir, rel, gpuUUID, t)
		if err != nil {
			return "", "", err
		}
		if n != "" {
			return n, decoy, nil
		}
		if decoy == "" && d != "" {
			decoy = fmt.Sprintf("%s, %d level(s) above the process's root: %s", ContainerPath(gpuUUID), level, d)
		}
		if level == maxLevels {
			break
		}
		up, there, err := climb(dir, "..")
		if err != nil {
			return "", "", err
		}
		if there == here {
			unix.Close(up)
			return "", decoy, ErrNotFound // the root of the mount namespace
		}
		unix.Close(dir)
		dir, here = up, there
	}
	// Deeper than maxLevels: jump up until a jump stays where it was, the
	// top, and look there.
	dots := strings.TrimSuffix(strings.Repeat("../", jumpDepth), "/")
	for range maxJumps {
		up, there, err := climb(dir, dots)
		if err != nil {
			return "", "", err
		}
		unix.Close(dir)
		dir = up
		if there == here {
			n, _, err := lookAt(dir, rel, gpuUUID, t)
			if err != nil {
				return "", "", err
			}
			if n == "" {
				return "", decoy, ErrNotFound
			}
			return n, decoy, nil
		}
		here = there
	}
	return "", decoy, ErrNotFound
}

// climb opens rel ("..", or many) above dir and says where it landed.
func climb(dir int, rel string) (int, place, error) {
	up, err := unix.Openat(dir, rel, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, place{}, fmt.Errorf("climbing towards the mount namespace's root: %w", err)
	}
	there, err := where(up)
	if err != nil {
		unix.Close(up)
		return -1, place{}, err
	}
	return up, there, nil
}

// place tells two directories apart, mounts included.
type place struct {
	dev, ino, mnt uint64
}

func where(fd int) (place, error) {
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_INO|unix.STATX_MNT_ID, &st); err != nil {
		return place{}, fmt.Errorf("finding identity file: %w", err)
	}
	p := place{dev: unix.Mkdev(st.Dev_major, st.Dev_minor), ino: st.Ino}
	if st.Mask&unix.STATX_MNT_ID != 0 {
		p.mnt = st.Mnt_id
	}
	return p, nil
}

// lookAt walks rel below dir. It returns the device's name when the file
// there is one of t's, of this GPU; else "" with the decoy's description
// ("" when nothing is there).
func lookAt(dir int, rel []string, gpuUUID gpu.UUID, t Table) (name, decoy string, err error) {
	cur := dir
	closeCur := func() {
		if cur != dir {
			unix.Close(cur)
		}
	}
	defer closeCur()
	for i, c := range rel {
		flags := unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i < len(rel)-1 {
			flags |= unix.O_DIRECTORY
		}
		next, err := unix.Openat(cur, c, flags, 0)
		switch {
		case errors.Is(err, unix.ENOENT):
			return "", "", nil
		case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
			return "", fmt.Sprintf("%q is a symbolic link or not a directory", "/"+strings.Join(rel[:i+1], "/")), nil
		case err != nil:
			return "", "", fmt.Errorf("finding identity file: %s: %w", c, err)
		}
		closeCur()
		cur = next
	}
	var st unix.Stat_t
	if err := unix.Fstat(cur, &st); err != nil {
		return "", "", fmt.Errorf("finding identity file: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", fmt.Sprintf("not a regular file (mode %#o)", st.Mode&unix.S_IFMT), nil
	}
	n, ok := t[FileID{Dev: uint64(st.Dev), Ino: st.Ino}]
	if !ok {
		return "", "a file the daemon did not make", nil
	}
	if uuid, _, _ := vdev.ParseName(n); uuid != gpuUUID {
		return "", "the identity file of " + n + ", a device of another GPU", nil
	}
	return n, "", nil
}
