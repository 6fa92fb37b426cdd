package mpssim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"yunion.io/x/mps-daemon/pkg/atomicfile"
	"yunion.io/x/mps-daemon/pkg/units"
)

// The simulated daemon is a JSON file in its pipe directory, not a process:
// it "runs" while the file exists, and every process that shares the
// directory sees the same daemon.

// simState is one simulated control daemon.
type simState struct {
	PID            int    `json:"pid"`
	VisibleDevices string `json:"visible_devices"`
	// LogDir is the daemon's CUDA_MPS_LOG_DIRECTORY: where a client's
	// connection is logged (connectLines).
	LogDir string `json:"log_dir,omitempty"`
	// Devices are the GPU UUIDs by device ordinal, as the daemon's servers
	// number them: CUDA_VISIBLE_DEVICES's order, or, without it, CUDA's own
	// order of the host's GPUs (SetCUDAOrder).
	Devices                 []string          `json:"devices,omitempty"`
	DeviceName              string            `json:"device_name"`
	DefaultThreadPercentage float64           `json:"default_thread_percentage"`
	DefaultMemoryLimits     map[int]units.MiB `json:"default_mem_limit_mib"` // by device ordinal; exact values
	DefaultClientPriority   int               `json:"default_client_priority,omitempty"`
	NextServerPID           int               `json:"next_server_pid"`
	Servers                 []simServer       `json:"servers"`
	// PrivilegedDev and PrivilegedIno name the control_privileged socket
	// the daemon made: a client reaching that socket, wherever it was
	// moved, is privileged (privileged); 0 in a state of an older
	// simulator: any socket of that name is.
	PrivilegedDev uint64 `json:"privileged_dev,omitempty"`
	PrivilegedIno uint64 `json:"privileged_ino,omitempty"`
}

type simServer struct {
	PID int `json:"pid"`
	// Fault is set by a client's fatal GPU exception; the server reports
	// FAULT until its last client is gone (mps-probe-fault.txt).
	Fault            bool              `json:"fault,omitempty"`
	ThreadPercentage float64           `json:"thread_percentage"`
	MemoryLimits     map[int]units.MiB `json:"mem_limit_mib"`
	Clients          []simClient       `json:"clients"`
}

type simClient struct {
	PID       int    `json:"pid"`
	Context   int    `json:"context"`
	Command   string `json:"command"`
	Namespace string `json:"namespace"`
}

// withState runs fn on the daemon state of pipeDir under the directory's
// mutex and file lock; *st is nil when no daemon runs. When fn reports a
// change the state is written back atomically, or removed when fn set it
// to nil.
func (s *Runner) withState(ctx context.Context, pipeDir string, fn func(st **simState) (dirty bool, err error)) error {
	if pipeDir == "" {
		var st *simState
		_, err := fn(&st)
		return err
	}
	mu := s.dirLock(pipeDir)
	mu.Lock()
	defer mu.Unlock()
	unlock, err := lockDir(ctx, pipeDir)
	if errors.Is(err, fs.ErrNotExist) {
		var st *simState // no pipe directory, no daemon
		_, err := fn(&st)
		return err
	}
	if err != nil {
		return err
	}
	defer unlock()
	path := filepath.Join(pipeDir, simStateFile)
	st, err := loadState(path)
	if err != nil {
		return err
	}
	dirty, err := fn(&st)
	if err != nil || !dirty {
		return err
	}
	if st == nil {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("simulated MPS control: %w", err)
		}
		return nil
	}
	return saveState(path, st)
}

// lockDir takes the simulator's flock in dir, polling so ctx bounds the wait.
func lockDir(ctx context.Context, dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, simLockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("simulated MPS control: opening lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil // closing releases the flock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("simulated MPS control: locking %s: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("simulated MPS control: waiting for the lock in %s: %w", dir, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func loadState(path string) (*simState, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("simulated MPS control: reading state: %w", err)
	}
	if len(b) == 0 {
		// What a crash of the host can leave of an unsynced state
		// (saveState): a daemon that did not survive the crash, as a real
		// one does not.
		return nil, nil
	}
	var st simState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("simulated MPS control: state %s: %w", path, err)
	}
	// Setters write into these maps; a state holding null must not panic.
	if st.DefaultMemoryLimits == nil {
		st.DefaultMemoryLimits = map[int]units.MiB{}
	}
	for i := range st.Servers {
		if st.Servers[i].MemoryLimits == nil {
			st.Servers[i].MemoryLimits = map[int]units.MiB{}
		}
	}
	return &st, nil
}

// saveState writes through a temporary file and a rename, so a reader never
// sees half a state. It is not synced (atomicfile.Replace): the state
// stands for a control daemon's memory, which another process on this
// host finds through the page cache (the agent after its restart) and
// which a reboot ends for a real daemon too. Syncing it made every
// set_default_* of a start wait for the disk.
func saveState(path string, st *simState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("simulated MPS control: encoding state: %w", err)
	}
	if err := atomicfile.Replace(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("simulated MPS control: %w", err)
	}
	return nil
}
