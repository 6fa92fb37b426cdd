package accounting

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"yunion.io/x/mps-daemon/pkg/vdev"
)

// ErrExited: the process is gone (no /proc entry) or a zombie.
var ErrExited = errors.New("process has exited")

// Identity is what the Mapper knows of one process.
type Identity struct {
	// Device is the virtual device's name (see vdev.Name).
	Device string
	// Source says where Device came from: "environ" or "cgroup".
	Source string
	// StartTicks is field 22 of /proc/<pid>/stat, the start time in clock
	// ticks after boot: larger is newer, and a PID with another start time
	// is another process.
	StartTicks uint64
}

// Mapper maps PIDs (in the PID namespace of ProcRoot) to virtual devices.
type Mapper struct {
	// ProcRoot is where procfs is mounted; "" means /proc. Tests point it at
	// a fake tree.
	ProcRoot string
	// Cgroup, when set, names the device of a process from the contents of
	// its /proc/<pid>/cgroup (ok false: no device's cgroup). A process
	// cannot leave its cgroup, so a device named this way wins over the
	// environment; environ remains the source for everything else.
	Cgroup func(cgroup []byte) (device string, ok bool)
}

func (m Mapper) path(pid int, file string) string {
	root := m.ProcRoot
	if root == "" {
		root = "/proc"
	}
	return filepath.Join(root, strconv.Itoa(pid), file)
}

// Lookup names the device of pid. ErrNoDevice (with the Identity's
// StartTicks set) when it names none, vdev.ErrBadName for a malformed name,
// ErrExited when it is gone; other errors (permission) say the /proc file
// could not be read. Only a nil error gives a Device.
func (m Mapper) Lookup(pid int) (Identity, error) {
	start, err := m.StartTicks(pid)
	if err != nil {
		return Identity{}, err
	}
	id := Identity{StartTicks: start}
	if m.Cgroup != nil {
		b, err := m.read(pid, "cgroup")
		if err != nil {
			return id, err
		}
		if dev, ok := m.Cgroup(b); ok {
			if _, _, err := vdev.ParseName(dev); err != nil {
				return id, fmt.Errorf("PID %d: cgroup mapping: %w", pid, err)
			}
			id.Device, id.Source = dev, "cgroup"
			return id, nil
		}
	}
	b, err := m.read(pid, "environ")
	if err != nil {
		return id, err
	}
	dev, err := ParseEnviron(b)
	if err != nil {
		return id, fmt.Errorf("PID %d: %w", pid, err)
	}
	id.Device, id.Source = dev, "environ"
	return id, nil
}

// StartTicks reads the start time of pid; ErrExited for a process that is
// gone or a zombie (which holds no GPU memory and cannot be signalled away).
func (m Mapper) StartTicks(pid int) (uint64, error) {
	b, err := m.read(pid, "stat")
	if err != nil {
		return 0, err
	}
	state, start, err := ParseStat(b)
	if err != nil {
		return 0, fmt.Errorf("PID %d: %w", pid, err)
	}
	if state == 'Z' || state == 'X' {
		return 0, fmt.Errorf("PID %d is a zombie: %w", pid, ErrExited)
	}
	return start, nil
}

func (m Mapper) read(pid int, file string) ([]byte, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("PID %d is not a process", pid)
	}
	b, err := os.ReadFile(m.path(pid, file))
	// ESRCH: the process exited between open and read.
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return nil, fmt.Errorf("PID %d: %w", pid, ErrExited)
	}
	if err != nil {
		return nil, fmt.Errorf("PID %d: reading %s: %w", pid, file, err)
	}
	return b, nil
}

// ParseStat reads the state (field 3) and start time (field 22) from the
// contents of /proc/<pid>/stat. The command name (field 2) is in parentheses
// and may hold spaces and parentheses itself, so fields are counted from the
// LAST ')'.
func ParseStat(stat []byte) (state byte, startTicks uint64, err error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("parsing /proc stat %.40q: no command name", stat)
	}
	rest := bytes.Fields(stat[i+1:])
	// rest[0] is field 3 (state), so field 22 is rest[19].
	if len(rest) < 20 || len(rest[0]) != 1 {
		return 0, 0, fmt.Errorf("parsing /proc stat %.40q: too few fields", stat)
	}
	start, err := strconv.ParseUint(string(rest[19]), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("parsing /proc stat: start time %q: %w", rest[19], err)
	}
	return rest[0][0], start, nil
}
