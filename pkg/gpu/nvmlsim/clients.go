package nvmlsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"syscall"

	"yunion.io/x/mps-daemon/pkg/atomicfile"
	"yunion.io/x/mps-daemon/pkg/gpu"
)

// A simulated host's NVML lists a GPU's MPS clients from a file under its
// root, so that what a real driver sees (real processes, in containers too,
// connected to MPS and using memory) can be stated from outside the daemon:
// by a test, the demo, an operator trying accounting. This file builds
// without cgo, so a test that is not linked with go-nvml can write it.

// simClientsDir holds one JSON file per GPU, named after its UUID.
const simClientsDir = "mps-processes"

// maxSimClientsFile bounds a hand-edited file.
const maxSimClientsFile = 1 << 20

// simClient is one entry of the file.
type simClient struct {
	PID             int    `json:"pid"`
	UsedMemoryBytes uint64 `json:"used_memory_bytes"`
}

// MPSProcessesPath is the file a simulated host with this root reads a
// GPU's MPS clients from: <root>/mps-processes/<GPU UUID>.json, a JSON list
// of {"pid": N, "used_memory_bytes": N}. No file: no clients.
func MPSProcessesPath(root string, uuid gpu.UUID) string {
	return filepath.Join(root, simClientsDir, uuid.String()+".json")
}

// WriteMPSProcesses replaces the MPS clients a simulated host with this
// root lists for GPU uuid (atomically: a reader sees the old list or the new
// one). nil lists none.
func WriteMPSProcesses(root string, uuid gpu.UUID, procs []gpu.Process) error {
	if s := uuid.String(); filepath.Base(s) != s || s == "" || s == "." || s == ".." {
		return fmt.Errorf("simulated MPS clients: GPU UUID %q", uuid)
	}
	list := make([]simClient, 0, len(procs))
	for _, p := range procs {
		if err := checkSimPID(p.PID); err != nil {
			return fmt.Errorf("simulated MPS clients of %s: %w", uuid, err)
		}
		list = append(list, simClient{PID: p.PID, UsedMemoryBytes: p.UsedMemoryBytes})
	}
	b, err := json.Marshal(list)
	if err != nil {
		return err
	}
	path := MPSProcessesPath(root, uuid)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("simulated MPS clients: %w", err)
	}
	return atomicfile.Write(path, append(b, '\n'), 0o644)
}

// readMPSProcesses is WriteMPSProcesses' list; nil when there is no
// file.
func readMPSProcesses(root string, uuid gpu.UUID) ([]gpu.Process, error) {
	// Non-blocking, a regular file only: a FIFO put there by hand must not
	// hold the accounting tick (and the main loop) up.
	f, err := os.OpenFile(MPSProcessesPath(root, uuid), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("simulated MPS clients of %s: %w", uuid, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("simulated MPS clients of %s: %s is not a regular file", uuid, f.Name())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSimClientsFile+1))
	if err != nil {
		return nil, fmt.Errorf("simulated MPS clients of %s: %w", uuid, err)
	}
	if len(b) > maxSimClientsFile {
		return nil, fmt.Errorf("simulated MPS clients of %s: %s is over %d bytes", uuid, f.Name(), maxSimClientsFile)
	}
	var list []simClient
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("simulated MPS clients of %s: %s: %w", uuid, f.Name(), err)
	}
	out := make([]gpu.Process, 0, len(list))
	for _, c := range list {
		if err := checkSimPID(c.PID); err != nil {
			return nil, fmt.Errorf("simulated MPS clients of %s: %s: %w", uuid, f.Name(), err)
		}
		out = append(out, gpu.Process{PID: c.PID, UsedMemoryBytes: c.UsedMemoryBytes})
	}
	return out, nil
}

func checkSimPID(pid int) error {
	if pid <= 0 || pid > math.MaxUint32 {
		return fmt.Errorf("PID %d is not a PID", pid)
	}
	return nil
}
