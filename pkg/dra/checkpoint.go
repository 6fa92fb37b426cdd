package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"

	"yunion.io/x/mps-daemon/pkg/atomicfile"
)

// Claim is a prepared ResourceClaim: what Unprepare needs (the kubelet
// sends only namespace, name and UID then) and what must keep being
// published as it was until then.
type Claim struct {
	UID       types.UID  `json:"uid"`
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	Devices   []Prepared `json:"devices"`
}

// Prepared is one device of a prepared claim: the device as it was
// published when the claim was prepared, and the request it serves.
type Prepared struct {
	Request string `json:"request"`
	Pool    string `json:"pool"`
	Device  Device `json:"device"`
}

// checkpointVersion is the layout of the checkpoint file; a file of
// another version is refused rather than misread.
const checkpointVersion = 1

type checkpoint struct {
	Version int                 `json:"version"`
	Claims  map[types.UID]Claim `json:"claims"`
}

// loadCheckpoint reads the prepared claims; a missing file is none.
func loadCheckpoint(path string) (map[types.UID]Claim, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[types.UID]Claim{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the DRA checkpoint: %w", err)
	}
	var c checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("reading the DRA checkpoint %s: %w", path, err)
	}
	if c.Version != checkpointVersion {
		return nil, fmt.Errorf("reading the DRA checkpoint %s: version %d, this daemon reads %d", path, c.Version, checkpointVersion)
	}
	if c.Claims == nil {
		c.Claims = map[types.UID]Claim{}
	}
	return c.Claims, nil
}

// saveCheckpoint writes the prepared claims through a temporary file and a
// rename: a crash leaves the old or the new file, never half of one.
func saveCheckpoint(path string, claims map[types.UID]Claim) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating the DRA checkpoint directory: %w", err)
	}
	b, err := json.MarshalIndent(checkpoint{Version: checkpointVersion, Claims: claims}, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing the DRA checkpoint: %w", err)
	}
	return nil
}
