//go:build cgo

package nvml

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"yunion.io/x/mps-daemon/pkg/gpu"
)

// Adapter reads GPUs through NVML. It implements gpu.Backend and is safe for
// concurrent use; Close waits for calls in flight, so NVML is never used after
// it is shut down.
type Adapter struct {
	lib Library
	log *slog.Logger

	mu     sync.RWMutex // held for reading by NVML calls, for writing by Close
	closed bool
}

var _ gpu.Backend = (*Adapter)(nil)

// New loads the host's NVML (libnvidia-ml.so.1, found by the dynamic loader at
// run time) and initialises it. On a host without the NVIDIA driver the error
// wraps ErrLibraryNotFound.
func New(log *slog.Logger) (*Adapter, error) {
	return NewWithLibrary(nvml.New(), log)
}

// NewWithLibrary initialises lib and wraps it: New gives the host's NVML,
// the simulated host (pkg/gpu/nvmlsim) go-nvml's mock machine. Real and
// simulated machines both come through here, so they are read by the same
// code.
func NewWithLibrary(lib Library, log *slog.Logger) (*Adapter, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "nvml")
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, initError(ret)
	}
	if version, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		log.Info("NVML initialised", "driver", version)
	} else {
		log.Warn("NVML initialised; driver version unknown", "err", ret.Error())
	}
	return &Adapter{lib: lib, log: log}, nil
}

// initError turns a failed nvmlInit into advice: the two common failures are a
// host without the driver and a driver whose kernel module is not loaded.
func initError(ret nvml.Return) error {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Errorf("initialising NVML: %w: install the NVIDIA driver, or run with --simulate on a host without a GPU", ErrLibraryNotFound)
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return fmt.Errorf("initialising NVML: %w (is the nvidia kernel module loaded?)", ret)
	}
	return fmt.Errorf("initialising NVML: %w", ret)
}

// Devices lists every GPU, sorted by PCI address, NUMANode left at -1. NVML
// calls cannot be cancelled, so ctx is checked between GPUs.
func (a *Adapter) Devices(ctx context.Context) ([]gpu.Info, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if err := a.usable(ctx); err != nil {
		return nil, fmt.Errorf("listing GPUs: %w", err)
	}
	n, ret := a.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("listing GPUs: %w", callError("nvmlDeviceGetCount", ret))
	}
	infos := make([]gpu.Info, 0, n)
	for i := range n {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("listing GPUs: %w", err)
		}
		d, ret := a.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("reading GPU %d: %w", i, callError("nvmlDeviceGetHandleByIndex", ret))
		}
		info, err := readDevice(d, i)
		if err != nil {
			if info.UUID != "" {
				return nil, fmt.Errorf("reading GPU %d (%s): %w", i, info.UUID, err)
			}
			return nil, fmt.Errorf("reading GPU %d: %w", i, err)
		}
		infos = append(infos, info)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].PCI.Compare(infos[j].PCI) < 0 })
	a.log.Debug("GPUs listed", "count", len(infos))
	return infos, nil
}

// SetComputeMode sets the compute mode of the GPU with this UUID. NVML needs
// root for it; without, the error wraps nvml.ERROR_NO_PERMISSION.
func (a *Adapter) SetComputeMode(ctx context.Context, uuid gpu.UUID, mode gpu.ComputeMode) error {
	if mode < gpu.ComputeModeDefault || mode > gpu.ComputeModeExclusiveProcess {
		return fmt.Errorf("setting compute mode of %s: unknown mode %d", uuid, int(mode))
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	if err := a.usable(ctx); err != nil {
		return fmt.Errorf("setting compute mode of %s to %s: %w", uuid, mode, err)
	}
	d, ret := a.lib.DeviceGetHandleByUUID(string(uuid))
	if ret != nvml.SUCCESS {
		return fmt.Errorf("setting compute mode of %s to %s: %w", uuid, mode, callError("nvmlDeviceGetHandleByUUID", ret))
	}
	if ret := d.SetComputeMode(nvml.ComputeMode(mode)); ret != nvml.SUCCESS {
		return fmt.Errorf("setting compute mode of %s to %s: %w", uuid, mode, callError("nvmlDeviceSetComputeMode", ret))
	}
	a.log.Info("compute mode set", "gpu", uuid, "mode", mode.String())
	return nil
}

// Close shuts NVML down. Later calls, Close included, do nothing more.
func (a *Adapter) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	if ret := a.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("shutting down NVML: %w", ret)
	}
	return nil
}

// usable is checked, with a.mu held, before each use of NVML.
func (a *Adapter) usable(ctx context.Context) error {
	if a.closed {
		return ErrClosed
	}
	return ctx.Err()
}
