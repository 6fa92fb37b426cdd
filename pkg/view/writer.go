package view

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"

	"yunion.io/x/mps-daemon/pkg/atomicfile"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// Modes: containers of any user read the views; only the daemon writes.
const (
	dirMode  fs.FileMode = 0o755
	fileMode fs.FileMode = 0o444
)

// Device is one device's view as its owner declares it: its name and its
// cap (a claim's size).
type Device struct {
	Name vdev.Name
	Cap  units.MiB
}

// Writer keeps the Store's views: it makes each device's directory and
// view file, replaces the file (a temporary file in the same directory,
// renamed over it: a container that has the directory mounted reads the
// old version or the new one, whole) only when its content changes, and
// removes the directories of devices that are gone once no container
// holds them. It writes without syncing: a view stands for the daemon's
// memory, is checked again at every Sync, and means nothing after a
// reboot; so many devices' used_bytes changing at each accounting pass
// cost a rename each, no fsync.
//
// The agent (its virtual devices) and the Kubernetes driver (its claims'
// devices) share one Writer: its methods are safe for concurrent use, and
// each caller's Sync removes only the directories of the devices it owns.
type Writer struct {
	store    Store
	procRoot string
	// native is the machine of the host's library (runtime.GOARCH's).
	native machine

	mu sync.Mutex
	// views are the devices whose directory and file this Writer made or
	// checked, with what the file says.
	views map[vdev.Name]Memory
	// preload, platforms: the preload list and the platform directory
	// were checked.
	preload, platforms bool
}

// NewWriter is a Writer of store's views; procRoot is where procfs is
// mounted (host.conf mps_proc_root), read to find the directories
// containers still hold.
func NewWriter(store Store, procRoot string) *Writer {
	native, _ := nativeMachine(runtime.GOARCH) // another GOARCH: every platform a stub
	return &Writer{store: store, procRoot: procRoot, native: native, views: map[vdev.Name]Memory{}}
}

// Store is where the Writer keeps its views.
func (w *Writer) Store() Store { return w.store }

// Sync makes the view of each of devs (the directory, and its file saying
// the device's cap and the last used_bytes known for it: for a device this
// Writer has no view of yet, what its file says while the file's total is
// the cap, as after a restart of the daemon, whose accounting may take a
// pass or more to measure the device again; else 0) and the preload list, checking those that exist, and removes the
// directory of every other device owns says is the caller's, unless a
// container holds it (a mount of it in some process's mount namespace).
// A cap of 0, one too large or a bad name is an error for that device,
// which gets no file (its previous one stays, if any); the others are
// made all the same and every problem is returned, joined. What could not
// be removed (or whether it is held could not be told) is in Pruned's
// error, apart: the views of devs are usable all the same.
func (w *Writer) Sync(owns func(vdev.Name) bool, devs []Device) (Pruned, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.ensureDir(); err != nil {
		return Pruned{}, err
	}
	var errs []error
	if err := w.ensurePreload(); err != nil {
		errs = append(errs, err)
	}
	if err := w.ensurePlatforms(); err != nil {
		errs = append(errs, err)
	}
	want := make(map[vdev.Name]bool, len(devs))
	for _, d := range devs {
		want[d.Name] = true
		total, err := TotalOf(d.Cap)
		if err != nil {
			errs = append(errs, fmt.Errorf("view of %s: %w", d.Name, err))
			continue
		}
		m := Memory{Total: total}
		if prev, known := w.views[d.Name]; known {
			m.Used = prev.Used
		} else {
			m.Used = w.usedOnFile(d.Name, total)
		}
		if err := w.ensure(d.Name, m, true); err != nil {
			errs = append(errs, err)
		}
	}
	return w.prune(func(n vdev.Name) bool { return owns(n) && !want[n] }), errors.Join(errs...)
}

// Pruned is what a Sync did with the views of devices that are gone.
type Pruned struct {
	// Removed and Held count the directories removed and kept because a
	// container holds them.
	Removed, Held int
	// Err: some could not be removed, or the mounts could not all be read
	// (then none was).
	Err error
}

// SetUsed writes each device's used_bytes where it changed, for the
// devices whose view this Writer made (the others are left alone: a
// device that has no view yet gets one at its owner's Sync, with the
// last figure set here). A device missing from used keeps its figure.
func (w *Writer) SetUsed(used map[vdev.Name]units.Bytes) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(used)) {
		m, ok := w.views[name]
		if !ok || m.Used == used[name] {
			continue
		}
		m.Used = used[name]
		if err := w.ensure(name, m, false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Views are the devices this Writer keeps a view of, with what each file
// says (for the status and tests).
func (w *Writer) Views() map[vdev.Name]Memory {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.views)
}

// usedOnFile is the used_bytes of name's view file when the file is a
// valid view of this total: a view a previous daemon wrote, still right
// until the accounting measures the device again (a container sizing
// itself from free must never be told the device is empty meanwhile).
// 0 for anything else: no file, another total (another device by that
// name), a file no library would read.
func (w *Writer) usedOnFile(name vdev.Name, total units.Bytes) units.Bytes {
	dir, err := w.store.Path(name)
	if err != nil {
		return 0
	}
	b, err := atomicfile.Read(filepath.Join(dir, MemoryFile), MaxFileBytes, false)
	if err != nil {
		return 0
	}
	m, err := Parse(b)
	if err != nil || m.Total != total {
		return 0
	}
	return m.Used
}

// ensureDir makes the Store's directory, or finds it: a directory (not a
// link) of this process's user.
func (w *Writer) ensureDir() error {
	dir := w.store.Dir
	if dir == "" || !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return fmt.Errorf("view directory %q: want an absolute clean path", dir)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("creating view directory: %w", err)
	}
	if err := os.Mkdir(dir, dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating view directory: %w", err)
	}
	return ownDir(dir, "view directory")
}

// ownDir checks that dir is a directory, not a link, of this process's
// user, and gives it dirMode.
func ownDir(dir, what string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s %s is not a directory (%s): not ours to replace", what, dir, fi.Mode().Type())
	case st == nil || int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s %s is not owned by this process's user", what, dir)
	case fi.Mode().Perm() != dirMode:
		if err := os.Chmod(dir, dirMode); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// ensurePreload writes the preload list when it is missing or wrong; once
// right it is never replaced (a file bind mount keeps its inode).
func (w *Writer) ensurePreload() error {
	if w.preload {
		return nil
	}
	p := w.store.PreloadPath()
	if err := replaceIfDiffers(p, PreloadContent(), true); err != nil {
		return fmt.Errorf("preload list: %w", err)
	}
	w.preload = true
	return nil
}

// ensurePlatforms makes the platform directory (platform.go): for each
// platform of the host's library a link to "..", where a container has
// the library; for every other, a directory holding the stub of its
// machine as LibraryFile. Checked once; an entry of the wrong kind (a
// state directory moved between architectures) is replaced.
func (w *Writer) ensurePlatforms() error {
	if w.platforms {
		return nil
	}
	dir := w.store.PlatformsPath()
	if err := os.Mkdir(dir, dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("platform directory: %w", err)
	}
	if err := ownDir(dir, "platform directory"); err != nil {
		return err
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(platformMachines)) {
		m, entry := platformMachines[name], filepath.Join(dir, name)
		fi, err := os.Lstat(entry)
		if m == w.native {
			if err == nil && fi.Mode().Type() == fs.ModeSymlink {
				if to, _ := os.Readlink(entry); to == ".." {
					continue
				}
			}
			if err := os.RemoveAll(entry); err != nil {
				errs = append(errs, err)
				continue
			}
			if err := os.Symlink("..", entry); err != nil {
				errs = append(errs, fmt.Errorf("platform %s: %w", name, err))
			}
			continue
		}
		if err == nil && !fi.IsDir() {
			if err := os.RemoveAll(entry); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if err := os.Mkdir(entry, dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
			errs = append(errs, fmt.Errorf("platform %s: %w", name, err))
			continue
		}
		if err := replaceIfDiffers(filepath.Join(entry, LibraryFile), stub(m), false); err != nil {
			errs = append(errs, fmt.Errorf("platform %s's stub: %w", name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("platform directory: %w", err)
	}
	w.platforms = true
	return nil
}

// ensure makes name's directory and file say m. check: read the file back
// and compare (a Sync); else the file is taken to say what this Writer
// last wrote (an accounting pass).
func (w *Writer) ensure(name vdev.Name, m Memory, check bool) error {
	data, err := Content(m)
	if err != nil {
		return fmt.Errorf("view of %s: %w", name, err)
	}
	dir, err := w.store.Path(name)
	if err != nil {
		return err
	}
	prev, known := w.views[name]
	if !known || check {
		if err := os.Mkdir(dir, dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("view of %s: %w", name, err)
		}
		if err := ownDir(dir, "view of "+name.String()); err != nil {
			return err
		}
		if err := removeStale(filepath.Join(dir, MemoryFile)); err != nil {
			return fmt.Errorf("view of %s: %w", name, err)
		}
		if err := replaceIfDiffers(filepath.Join(dir, MemoryFile), data, false); err != nil {
			delete(w.views, name)
			return fmt.Errorf("view of %s: %w", name, err)
		}
	} else if prev != m {
		if err := atomicfile.Replace(filepath.Join(dir, MemoryFile), data, fileMode); err != nil {
			delete(w.views, name)
			return fmt.Errorf("view of %s: %w", name, err)
		}
	}
	w.views[name] = m
	return nil
}

// replaceIfDiffers replaces path with data (synced when durable) unless
// it is a regular file that holds data already. Anything there that is
// not a regular file is an error.
func replaceIfDiffers(path string, data []byte, durable bool) error {
	have, err := atomicfile.Read(path, MaxFileBytes, false)
	var re *atomicfile.ReadError
	switch {
	case err == nil && bytes.Equal(have, data):
		if fi, err := os.Lstat(path); err == nil && fi.Mode().Perm() != fileMode {
			return os.Chmod(path, fileMode)
		}
		return nil
	case errors.Is(err, atomicfile.ErrSymlink) || (errors.As(err, &re) && re.Mode.Type() != 0):
		return fmt.Errorf("%s is not a regular file: not ours to replace", path)
	}
	if durable {
		return atomicfile.Write(path, data, fileMode)
	}
	return atomicfile.Replace(path, data, fileMode)
}

// removeStale deletes temporary files a crash between create and rename
// left beside path.
func removeStale(path string) error {
	stale, err := atomicfile.Stale(path)
	if err != nil {
		return err
	}
	for _, f := range stale {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}
