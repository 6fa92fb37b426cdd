//go:build !cgo

package nvmlsim

import (
	"log/slog"

	"yunion.io/x/mps-daemon/pkg/gpu"
	gpunvml "yunion.io/x/mps-daemon/pkg/gpu/nvml"
)

// New returns ErrNoCgo: go-nvml's mock machines need a cgo build.
func New(profile, root string, log *slog.Logger) (*gpunvml.Adapter, *Host, error) {
	return nil, nil, gpunvml.ErrNoCgo
}

// Host stands in for the simulated host in a build without cgo.
type Host struct{}

// Profile returns "".
func (h *Host) Profile() string { return "" }

// SysfsRoot returns "".
func (h *Host) SysfsRoot() string { return "" }

// DevRoot returns "".
func (h *Host) DevRoot() string { return "" }

// GPUs returns nil.
func (h *Host) GPUs() []gpu.Info { return nil }

// SetMPSProcesses returns ErrNoCgo.
func (h *Host) SetMPSProcesses(uuid gpu.UUID, procs []gpu.Process) error { return gpunvml.ErrNoCgo }
