//go:build cgo

package nvml

import (
	"context"
	"fmt"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"yunion.io/x/mps-daemon/pkg/gpu"
)

// valueNotAvailable is NVML_VALUE_NOT_AVAILABLE, which NVML puts in
// usedGpuMemory where it cannot tell (Windows WDDM, some virtualised setups).
const valueNotAvailable = ^uint64(0)

// MPSProcesses lists the MPS clients on the GPU with this UUID, sorted by
// PID; a PID NVML lists more than once (one entry per context) is summed.
// A driver that cannot answer gives an error wrapping gpu.ErrNotSupported,
// and an unknown usage an error too: both would otherwise read as "uses
// nothing", which accounting must never believe.
func (a *Adapter) MPSProcesses(ctx context.Context, uuid gpu.UUID) ([]gpu.Process, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if err := a.usable(ctx); err != nil {
		return nil, fmt.Errorf("listing MPS processes of %s: %w", uuid, err)
	}
	d, ret := a.lib.DeviceGetHandleByUUID(string(uuid))
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("listing MPS processes of %s: %w", uuid, callError("nvmlDeviceGetHandleByUUID", ret))
	}
	return mpsProcesses(d, uuid)
}

// mpsProcesses asks one device; split out so tests can hand it a mock device
// answering what the mock server cannot (NOT_SUPPORTED, unknown usage).
func mpsProcesses(d device, uuid gpu.UUID) ([]gpu.Process, error) {
	infos, ret := d.GetMPSComputeRunningProcesses()
	switch {
	case ret == nvml.SUCCESS:
	case unsupported(ret):
		return nil, fmt.Errorf("listing MPS processes of %s: %w (%w)", uuid, gpu.ErrNotSupported,
			callError("nvmlDeviceGetMPSComputeRunningProcesses", ret))
	default:
		return nil, fmt.Errorf("listing MPS processes of %s: %w", uuid, callError("nvmlDeviceGetMPSComputeRunningProcesses", ret))
	}
	byPID := map[int]uint64{}
	for _, p := range infos {
		if p.UsedGpuMemory == valueNotAvailable {
			return nil, fmt.Errorf("listing MPS processes of %s: NVML cannot tell the memory used by PID %d", uuid, p.Pid)
		}
		byPID[int(p.Pid)] += p.UsedGpuMemory
	}
	out := make([]gpu.Process, 0, len(byPID))
	for pid, used := range byPID {
		out = append(out, gpu.Process{PID: pid, UsedMemoryBytes: used})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}
