package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"yunion.io/x/mps-daemon/pkg/atomicfile"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/units"
)

// Claim is a prepared claim (a Kubernetes ResourceClaim): what Unprepare
// needs (the kubelet sends only namespace, name and UID then) and what
// must keep being published as it was until then.
type Claim struct {
	UID       string     `json:"uid"`
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	Devices   []Prepared `json:"devices"`
}

// Prepared is one device of a prepared claim: the device as it was
// published when the claim was prepared, and the request it serves; on a
// GPU's claims device, the claim's own device (Own).
type Prepared struct {
	Request string `json:"request"`
	Pool    string `json:"pool"`
	Device  Device `json:"device"`
	// Own is the claim's own device on a claims Device; nil on a fixed
	// slice. (Its JSON name, "share", is the checkpoint's since version 2.)
	Own *ClaimDevice `json:"share,omitempty"`
}

// ClaimDevice is a claim's own device on a GPU shared by claims of any
// size: <GPU UUID>::<Index> with the claim's caps, its entry in the
// claims' CDI spec and its identity file.
type ClaimDevice struct {
	// ID is the allocation's share of the device (its result's ShareID):
	// the second name of its CDI entry, by which a rebuilt checkpoint finds
	// its index again.
	ID string `json:"id"`
	// Index is claim.IndexBase + its slot on the GPU.
	Index            int       `json:"index"`
	MemoryLimit      units.MiB `json:"memoryLimitMiB"`
	ThreadPercentage int       `json:"threadPercentage"`
	// CDIName is the qualified name of its entry in the claims' spec.
	CDIName string `json:"cdiName"`
	// Minor, PipeDir and ClientPriority are what its CDI entry was made
	// from: used again only when the agent does not know its GPU any more.
	Minor          int    `json:"minor"`
	PipeDir        string `json:"pipeDir"`
	ClientPriority int    `json:"clientPriority"`
}

// checkpointVersion is the layout of the checkpoint file: 2 added claims'
// own devices on GPUs shared by claims; 1 (fixed slices only) is read as
// well. A file of a
// later version is refused rather than misread.
const checkpointVersion = 2

// maxCheckpointBytes bounds what is read: 128 claims of 16 devices take
// well under a MiB.
const maxCheckpointBytes = 16 << 20

// ErrCorrupt marks a checkpoint file that cannot be the daemon's: not a
// regular file, too large, truncated, not JSON, or claims that do not hold
// together. Open moves it aside and the prepared claims are rebuilt
// (Rebuild) from the API server's.
var ErrCorrupt = errors.New("corrupt DRA checkpoint")

type checkpoint struct {
	Version int              `json:"version"`
	Claims  map[string]Claim `json:"claims"`
}

// loadCheckpoint reads the prepared claims; a missing file is none. What
// the file holds is checked (check); anything wrong with it is ErrCorrupt.
func loadCheckpoint(path string) (map[string]Claim, error) {
	b, err := readRegular(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]Claim{}, nil
	}
	if err != nil {
		return nil, err
	}
	var c checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	if c.Version > checkpointVersion {
		return nil, fmt.Errorf("reading the DRA checkpoint %s: version %d, this daemon reads %d and earlier", path, c.Version, checkpointVersion)
	}
	if c.Version < 1 {
		return nil, fmt.Errorf("%w: %s: version %d", ErrCorrupt, path, c.Version)
	}
	if c.Claims == nil {
		c.Claims = map[string]Claim{}
	}
	if err := check(c.Claims); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	return c.Claims, nil
}

// readRegular reads path, a regular file (not a link) of at most
// maxCheckpointBytes (atomicfile.Read: a FIFO is never waited on, a huge
// file never read whole); anything else there is ErrCorrupt.
func readRegular(path string) ([]byte, error) {
	b, err := atomicfile.Read(path, maxCheckpointBytes, false)
	var re *atomicfile.ReadError
	switch {
	case errors.As(err, &re) || errors.Is(err, atomicfile.ErrSymlink):
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("reading the DRA checkpoint: %w", err)
	}
	return b, err
}

// check refuses claims that cannot have been written by the driver: a
// claim under another UID, a device without a name, a claim's own device
// without a share ID, with an index below claim.IndexBase or without caps,
// two own devices of one index on one GPU.
func check(claims map[string]Claim) error {
	type key struct {
		gpu   string
		index int
	}
	used := map[key]string{}
	for uid, c := range claims {
		if uid == "" || c.UID != uid {
			return fmt.Errorf("claim %q is filed under %q", c.UID, uid)
		}
		if len(c.Devices) == 0 {
			return fmt.Errorf("claim %s has no devices", uid)
		}
		for _, p := range c.Devices {
			if p.Device.Name == "" || p.Device.GPUUUID == "" || p.Pool == "" {
				return fmt.Errorf("claim %s has a device without a name, GPU or pool", uid)
			}
			s := p.Own
			if s == nil {
				continue
			}
			if _, ok := claim.IsClaim(s.Index); !ok || s.ID == "" || s.MemoryLimit <= 0 || s.ThreadPercentage <= 0 || s.CDIName == "" {
				return fmt.Errorf("claim %s: its own device %+v is incomplete", uid, *s)
			}
			k := key{p.Device.GPUUUID, s.Index}
			if other, dup := used[k]; dup {
				return fmt.Errorf("claims %s and %s both hold index %d of GPU %s", other, uid, s.Index, p.Device.GPUUUID)
			}
			used[k] = uid
		}
	}
	return nil
}

// rebuildMarker is the file beside the checkpoint that says its claims
// are to be rebuilt from the API server: written before a corrupt
// checkpoint is moved aside and removed only once the rebuilt one is
// written, so a restart in between (the API server still away) rebuilds
// too instead of starting with no claims.
func rebuildMarker(path string) string { return path + ".rebuild" }

// markRebuild writes the marker, why in it for whoever looks.
func markRebuild(path string, why error, now time.Time) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating the DRA checkpoint directory: %w", err)
	}
	msg := fmt.Sprintf("%s: the prepared claims are rebuilt from the API server: %v\n", now.UTC().Format(time.RFC3339), why)
	if err := atomicfile.Write(rebuildMarker(path), []byte(msg), 0o600); err != nil {
		return fmt.Errorf("marking the DRA checkpoint for a rebuild: %w", err)
	}
	return nil
}

// pendingRebuild reads the marker: why the claims are to be rebuilt, nil
// when they are not. Whatever is at the marker's path (unreadable, not a
// file), the claims are not known: they are rebuilt.
func pendingRebuild(path string) error {
	b, err := atomicfile.Read(rebuildMarker(path), maxCheckpointBytes, false)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("%w: a rebuild is pending (%s: %v)", ErrCorrupt, rebuildMarker(path), err)
	}
	return fmt.Errorf("%w: a rebuild is pending since %s", ErrCorrupt, strings.TrimSpace(string(b)))
}

// rebuildDone removes the marker once the rebuilt checkpoint is written.
func rebuildDone(path string) error {
	if err := os.Remove(rebuildMarker(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the DRA checkpoint's rebuild marker: %w", err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("removing the DRA checkpoint's rebuild marker: %w", err)
	}
	return nil
}

// moveAside renames a corrupt checkpoint to <path>.corrupt-<time>, kept for
// whoever looks into it, and says where it went.
func moveAside(path string, now time.Time) (string, error) {
	aside := path + ".corrupt-" + now.UTC().Format("20060102T150405Z")
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("moving the corrupt DRA checkpoint aside: %w", err)
	}
	return aside, nil
}

// saveCheckpoint writes the prepared claims through a temporary file and a
// rename: a crash leaves the old or the new file, never half of one.
func saveCheckpoint(path string, claims map[string]Claim) error {
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
