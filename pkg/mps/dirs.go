package mps

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// modeFile records how this project started a control daemon, so that after
// its own restart it knows whether an adopted daemon serves every UID
// (-multiuser-server) or one UID at a time. The control daemon itself cannot
// be asked.
const modeFile = "yunion-mps-mode"

const (
	modeMultiUser = "multiuser-server"
	modePerUser   = "per-user-server"
)

func modeName(multi bool) string {
	if multi {
		return modeMultiUser
	}
	return modePerUser
}

// recordMode notes the mode a daemon was started with in its pipe directory.
func recordMode(pipeDir string, multi bool) error {
	if err := os.WriteFile(filepath.Join(pipeDir, modeFile), []byte(modeName(multi)+"\n"), 0o644); err != nil {
		return fmt.Errorf("recording the MPS server mode: %w", err)
	}
	return nil
}

// recordedMode reads it back; known is false for a daemon started by someone
// else (or an older version of this project).
func recordedMode(pipeDir string) (multi, known bool) {
	b, err := os.ReadFile(filepath.Join(pipeDir, modeFile))
	if err != nil {
		return false, false
	}
	switch strings.TrimSpace(string(b)) {
	case modeMultiUser:
		return true, true
	case modePerUser:
		return false, true
	}
	return false, false
}

// prepareDir creates an MPS directory so that MPS clients of ANY UID can use
// it and nothing more: the directory and its parent (the configured root) are
// 0755 — traversable and readable by all, writable by root alone. Clients
// connect to the sockets inside, which the daemon creates 0666; they never
// need to create files. A parent that is group- or world-writable without the
// sticky bit (anyone could swap the pipe directory) is tightened; the sticky
// /tmp above it is fine.
func prepareDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating MPS directory: %w", err)
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("checking MPS directory: %w", err)
		}
		perm := fi.Mode()
		loose := perm.Perm()&0o022 != 0 && perm&fs.ModeSticky == 0
		closed := perm.Perm()&0o055 != 0o055
		if d == dir || loose || closed {
			if err := os.Chmod(d, 0o755); err != nil && !(d != dir && errors.Is(err, fs.ErrPermission)) {
				return fmt.Errorf("making MPS directory %s usable by every UID (0755): %w", d, err)
			}
		}
	}
	return nil
}

// devicesFile records the CUDA_VISIBLE_DEVICES a daemon was started with:
// in the single layout the daemon's device ordinal i is its i-th UUID, and
// after our own restart that is the only way to know the mapping.
const devicesFile = "yunion-mps-devices"

func recordDevices(pipeDir, visible string) error {
	if err := os.WriteFile(filepath.Join(pipeDir, devicesFile), []byte(visible+"\n"), 0o644); err != nil {
		return fmt.Errorf("recording the MPS control daemon's devices: %w", err)
	}
	return nil
}

// RecordedDevices is the CUDA_VISIBLE_DEVICES this project started the
// daemon in pipeDir with; known is false for a daemon started elsewhere.
func RecordedDevices(pipeDir string) (visible string, known bool) {
	b, err := os.ReadFile(filepath.Join(pipeDir, devicesFile))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

func orUnknown(s string, known bool) string {
	if !known {
		return "unknown (started elsewhere)"
	}
	return s
}
