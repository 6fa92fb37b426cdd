package gpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"yunion.io/x/mps-daemon/pkg/atomicfile"
)

// ModeFile keeps, per GPU UUID, the compute mode the GPU had before the
// daemon first changed it, so that tearing down (or a GPU the daemon no
// longer needs) can put it back. It survives restarts and upgrades of the
// daemon: it lives in the state directory.
const ModeFile = "compute-modes.json"

// Modes is the record of the compute modes the daemon changed (ModeFile in
// a state directory); safe for concurrent use.
type Modes struct {
	dir string
	mu  sync.Mutex
}

// NewModes is the record in state directory dir.
func NewModes(dir string) *Modes { return &Modes{dir: dir} }

// Previous reads the remembered compute modes; none remembered is an empty
// map.
func (s *Modes) Previous() (map[UUID]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.read()
}

func (s *Modes) read() (map[UUID]string, error) {
	modes := map[UUID]string{}
	b, err := os.ReadFile(filepath.Join(s.dir, ModeFile))
	if errors.Is(err, fs.ErrNotExist) {
		return modes, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading state: %w", err)
	}
	if err := json.Unmarshal(b, &modes); err != nil {
		return nil, fmt.Errorf("reading state %s: %w", filepath.Join(s.dir, ModeFile), err)
	}
	return modes, nil
}

// Remember records mode as the GPU's original compute mode unless one is
// already recorded: the first reading is the one to restore.
func (s *Modes) Remember(uuid UUID, mode ComputeMode) error {
	return s.RememberAll(map[UUID]ComputeMode{uuid: mode})
}

// RememberAll is Remember for several GPUs in one write of the file (one
// sync, where a GPU each made the GPUs of a start wait for one another's
// syncs under the lock).
func (s *Modes) RememberAll(modes map[UUID]ComputeMode) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	have, err := s.read()
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
	return writeJSON(filepath.Join(s.dir, ModeFile), have)
}

// writeJSON writes v as JSON through a temporary file and a rename, so a
// crash leaves either the old or the new file, never half of one.
func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating state directory: %w", err)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'), 0o644)
}

// Forget drops a GPU's remembered mode once it has been restored.
func (s *Modes) Forget(uuid UUID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	modes, err := s.read()
	if err != nil {
		return err
	}
	if _, ok := modes[uuid]; !ok {
		return nil
	}
	delete(modes, uuid)
	return writeJSON(filepath.Join(s.dir, ModeFile), modes)
}
