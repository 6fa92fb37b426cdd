package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"yunion.io/x/mps-daemon/pkg/atomicfile"
	"yunion.io/x/mps-daemon/pkg/gpu"
)

// computeModeFile keeps, per GPU UUID, the compute mode the GPU had before this
// daemon first changed it, so that tearing down can put it back. It survives
// restarts and upgrades of the daemon (it lives in the state directory).
const computeModeFile = "compute-modes.json"

// stateDir is the daemon's directory of persistent state.
type stateDir struct {
	path string
	mu   sync.Mutex
}

// previousModes reads the remembered compute modes; none remembered is an
// empty map.
func (s *stateDir) previousModes() (map[gpu.UUID]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readModes()
}

func (s *stateDir) readModes() (map[gpu.UUID]string, error) {
	modes := map[gpu.UUID]string{}
	b, err := os.ReadFile(filepath.Join(s.path, computeModeFile))
	if errors.Is(err, fs.ErrNotExist) {
		return modes, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading state: %w", err)
	}
	if err := json.Unmarshal(b, &modes); err != nil {
		return nil, fmt.Errorf("reading state %s: %w", filepath.Join(s.path, computeModeFile), err)
	}
	return modes, nil
}

// rememberMode records mode as the GPU's original compute mode unless one is
// already recorded: the first reading is the one to restore.
func (s *stateDir) rememberMode(uuid gpu.UUID, mode gpu.ComputeMode) error {
	return s.rememberModes(map[gpu.UUID]gpu.ComputeMode{uuid: mode})
}

// rememberModes is rememberMode for several GPUs in one write of the file
// (one sync, where a GPU each made the GPUs of a start wait for one
// another's syncs under the lock).
func (s *stateDir) rememberModes(modes map[gpu.UUID]gpu.ComputeMode) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	have, err := s.readModes()
	if err != nil {
		return err
	}
	added := false
	for uuid, mode := range modes {
		if _, ok := have[uuid]; !ok {
			have[uuid] = mode.String()
			added = true
		}
	}
	if !added {
		return nil
	}
	return writeFileAtomic(filepath.Join(s.path, computeModeFile), have)
}

// writeFileAtomic writes v as JSON through a temporary file and a rename, so
// a crash leaves either the old or the new file, never half of one.
func writeFileAtomic(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating state directory: %w", err)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'), 0o644)
}

// forgetMode drops a GPU's remembered mode once it has been restored.
func (s *stateDir) forgetMode(uuid gpu.UUID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	modes, err := s.readModes()
	if err != nil {
		return err
	}
	if _, ok := modes[uuid]; !ok {
		return nil
	}
	delete(modes, uuid)
	return writeFileAtomic(filepath.Join(s.path, computeModeFile), modes)
}
