// Package atomicfile replaces a file whole: the new content goes to a
// temporary file beside it, is synced, and is renamed over it, so a reader
// (or a crash) sees the old content or the new one, never half of either.
// Replace is the same without the syncs, for a file that must outlive its
// writer's process but not the host. Read is how such a file (or one an
// operator names) is read back: a regular file of bounded size, never a
// FIFO waited on.
package atomicfile

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// TempPattern is the name of the temporary files for path (os.CreateTemp's
// pattern): hidden, and recognisable, so that Stale can find the ones a
// crash between create and rename left behind.
func TempPattern(path string) string {
	return "." + filepath.Base(path) + ".*.tmp"
}

// Write replaces path with data, mode perm.
func Write(path string, data []byte, perm fs.FileMode) error {
	return WriteChecked(path, data, perm, nil)
}

// WriteChecked is Write with a check of the written temporary file before
// it replaces path (the CDI spec is loaded by the CDI library there); when
// check fails, path is left as it was.
func WriteChecked(path string, data []byte, perm fs.FileMode, check func(tmp string) error) error {
	return write(path, data, perm, check, true)
}

// Replace is Write without the syncs: a reader still sees the old content
// or the new one, whole, but a crash of the host may leave either, or an
// empty file. It is for state that stands for a process's memory (the
// simulated MPS control's): it must be found by the next process on the
// same host, through the page cache, and has no meaning after a reboot.
// Nothing a real host needs after a crash is written with it.
func Replace(path string, data []byte, perm fs.FileMode) error {
	return write(path, data, perm, nil, false)
}

func write(path string, data []byte, perm fs.FileMode, check func(tmp string) error, durable bool) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, TempPattern(path))
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	done := false
	defer func() {
		if !done {
			_ = os.Remove(tmp.Name())
		}
	}()
	err = tmp.Chmod(perm)
	if err == nil {
		_, err = tmp.Write(data)
	}
	if err == nil && durable {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if check != nil {
		if err := check(tmp.Name()); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	done = true
	if !durable {
		return nil
	}
	// The rename is durable once the directory is.
	return SyncDir(dir)
}

// SyncDir makes the creations, renames and removals in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

// Stale lists the temporary files of path that a crash left behind.
func Stale(path string) ([]string, error) {
	return filepath.Glob(filepath.Join(filepath.Dir(path), TempPattern(path)))
}
