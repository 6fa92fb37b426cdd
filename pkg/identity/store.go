package identity

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"yunion.io/x/mps-daemon/pkg/atomicfile"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// dirMode keeps everyone but root out of the Store's directory: an
// unprivileged host user who could reach a file there could bind-mount it in
// a user namespace of its own and pass for that device.
const (
	dirMode  fs.FileMode = 0o700
	fileMode fs.FileMode = 0o444
	// maxContent bounds what Ensure reads back from a file of its own.
	maxContent = 256
)

// FileID is a file's device and inode: what a bind mount keeps and a copy
// does not.
type FileID struct{ Dev, Ino uint64 }

// Table maps the Store's files to the names of their devices.
type Table map[FileID]string

// Store is the host's directory of identity files (<state directory>/identity).
type Store struct{ Dir string }

// fileName is "<GPU UUID>.<i>": no colon, which some tools read as a
// separator in mount specifications.
func fileName(name string) (string, error) {
	if !validName(name) {
		return "", fmt.Errorf("identity file for %q: %w", name, vdev.ErrBadName)
	}
	uuid, i, _ := vdev.ParseName(name)
	return string(uuid) + "." + strconv.Itoa(i), nil
}

// nameOf reverses fileName; ok false for anything else in the directory.
func nameOf(file string) (string, bool) {
	k := strings.LastIndexByte(file, '.')
	if k <= 0 {
		return "", false
	}
	i, err := strconv.Atoi(file[k+1:])
	if err != nil || i < 0 || strconv.Itoa(i) != file[k+1:] {
		return "", false
	}
	name := string(vdev.NameOf(gpu.UUID(file[:k]), i))
	return name, validName(name)
}

// Path is the host file of device name, the source of its CDI bind mount.
func (s Store) Path(name vdev.Name) (string, error) {
	f, err := fileName(string(name))
	if err != nil {
		return "", err
	}
	return filepath.Join(s.Dir, f), nil
}

// Ensure makes sure each named device has its file: created when missing
// (written beside it, then linked into place, so nobody ever sees it half
// written), its content and mode put right in place when wrong. A file is
// never replaced by another one or removed: a container holding it keeps
// the inode the daemon knows. Anything at a file's path that is not a
// regular file is an error, as is a directory that is not root's own.
func (s Store) Ensure(names []vdev.Name) error {
	if err := s.ensureDir(); err != nil {
		return err
	}
	// The files are independent: looked at (and made) side by side, so
	// that the syncs of a start's new files share the file system's
	// commits instead of waiting for one another.
	errs := make([]error, len(names), len(names)+1)
	sem := make(chan struct{}, ensureWorkers)
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = s.ensureFile(string(n))
		})
	}
	wg.Wait()
	// The links are durable once the directory is. Synced every time, not
	// only when this call linked a file: a file linked by a call whose
	// sync failed, or by a process killed before its sync, is found by
	// the next call as one that exists, and must still be made durable
	// before a spec names it.
	if err := atomicfile.SyncDir(s.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ensureWorkers bounds the files Ensure handles at once.
const ensureWorkers = 8

func (s Store) ensureDir() error {
	if s.Dir == "" || !filepath.IsAbs(s.Dir) {
		return fmt.Errorf("identity directory %q: want an absolute path", s.Dir)
	}
	if err := os.MkdirAll(filepath.Dir(s.Dir), 0o755); err != nil {
		return fmt.Errorf("creating identity directory: %w", err)
	}
	if err := os.Mkdir(s.Dir, dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating identity directory: %w", err)
	}
	fi, err := os.Lstat(s.Dir)
	if err != nil {
		return fmt.Errorf("identity directory: %w", err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("identity directory %s is not a directory (%s)", s.Dir, fi.Mode().Type())
	case st == nil || int(st.Uid) != os.Geteuid():
		return fmt.Errorf("identity directory %s is not owned by this process's user", s.Dir)
	case fi.Mode().Perm() != dirMode:
		if err := os.Chmod(s.Dir, dirMode); err != nil {
			return fmt.Errorf("identity directory: %w", err)
		}
	}
	return nil
}

// ensureFile makes or repairs name's file.
func (s Store) ensureFile(name string) error {
	path, err := s.Path(vdev.Name(name))
	if err != nil {
		return err
	}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s.create(path, name)
	case err != nil:
		return fmt.Errorf("identity file of %s: %w", name, err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("identity file of %s: %s is a %s, not a regular file: not ours to replace", name, path, fi.Mode().Type())
	}
	return s.repair(path, name, fi)
}

// repair puts the content and mode of name's existing file right, in place.
func (s Store) repair(path, name string, fi fs.FileInfo) error {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("identity file of %s: %w", name, err)
	}
	defer f.Close()
	have, err := io.ReadAll(io.LimitReader(f, maxContent))
	if err != nil {
		return fmt.Errorf("identity file of %s: %w", name, err)
	}
	if !bytes.Equal(have, content(name)) {
		// Same inode, right content: a crash or a hand edit is undone
		// without breaking the mounts of running containers.
		if err := f.Truncate(0); err != nil {
			return fmt.Errorf("identity file of %s: %w", name, err)
		}
		if _, err := f.WriteAt(content(name), 0); err != nil {
			return fmt.Errorf("identity file of %s: %w", name, err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("identity file of %s: %w", name, err)
		}
	}
	if fi.Mode().Perm() != fileMode {
		if err := f.Chmod(fileMode); err != nil {
			return fmt.Errorf("identity file of %s: %w", name, err)
		}
	}
	return nil
}

// create writes the file beside path and links it into place: another
// Ensure racing this one finds either nothing or the whole file.
func (s Store) create(path, name string) error {
	tmp, err := os.CreateTemp(s.Dir, ".new-*")
	if err != nil {
		return fmt.Errorf("identity file of %s: %w", name, err)
	}
	defer os.Remove(tmp.Name())
	err = tmp.Chmod(fileMode)
	if err == nil {
		_, err = tmp.Write(content(name))
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), path)
	}
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("identity file of %s: %w", name, err)
	}
	return nil
}

// Table lists the Store's files by device and inode. A directory that does
// not exist yet holds none.
func (s Store) Table() (Table, error) {
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return Table{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing identity files: %w", err)
	}
	t := make(Table, len(entries))
	for _, e := range entries {
		name, ok := nameOf(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		fi, err := os.Lstat(filepath.Join(s.Dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing identity files: %w", err)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() {
			t[FileID{Dev: uint64(st.Dev), Ino: st.Ino}] = name
		}
	}
	return t, nil
}
