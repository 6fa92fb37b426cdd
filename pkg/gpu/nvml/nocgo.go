//go:build !cgo

package nvml

import (
	"context"
	"log/slog"

	"yunion.io/x/mps-daemon/pkg/gpu"
)

// Adapter stands in for the NVML adapter in a build without cgo; it cannot be
// made, as every constructor returns ErrNoCgo.
type Adapter struct{}

var _ gpu.Backend = (*Adapter)(nil)

// New returns ErrNoCgo: NVML needs a cgo build.
func New(log *slog.Logger) (*Adapter, error) { return nil, ErrNoCgo }

// Devices returns ErrNoCgo.
func (a *Adapter) Devices(ctx context.Context) ([]gpu.Info, error) { return nil, ErrNoCgo }

// SetComputeMode returns ErrNoCgo.
func (a *Adapter) SetComputeMode(ctx context.Context, uuid gpu.UUID, mode gpu.ComputeMode) error {
	return ErrNoCgo
}

// MPSProcesses returns ErrNoCgo.
func (a *Adapter) MPSProcesses(ctx context.Context, uuid gpu.UUID) ([]gpu.Process, error) {
	return nil, ErrNoCgo
}

// Close does nothing.
func (a *Adapter) Close() error { return nil }

// DriverVersion returns ErrNoCgo.
func (a *Adapter) DriverVersion() (string, error) { return "", ErrNoCgo }
