// Package gpu describes the physical GPUs of a host as the rest of the daemon
// sees them. The facts come from NVML (through the adapter in pkg/gpu/nvml, the
// only package that uses cgo) and from sysfs (NUMA node, render nodes), whose
// root is configurable so tests run on fake trees.
package gpu

import (
	"context"
	"errors"
	"fmt"

	"yunion.io/x/mps-daemon/pkg/pci"
	"yunion.io/x/mps-daemon/pkg/units"
)

// ComputeMode is NVML's compute mode, with NVML's numbering.
type ComputeMode int

// Compute modes as NVML numbers them.
const (
	ComputeModeDefault          ComputeMode = 0
	ComputeModeExclusiveThread  ComputeMode = 1
	ComputeModeProhibited       ComputeMode = 2
	ComputeModeExclusiveProcess ComputeMode = 3
)

// String prints the mode as nvidia-smi does.
func (m ComputeMode) String() string {
	switch m {
	case ComputeModeDefault:
		return "Default"
	case ComputeModeExclusiveThread:
		return "Exclusive_Thread"
	case ComputeModeProhibited:
		return "Prohibited"
	case ComputeModeExclusiveProcess:
		return "Exclusive_Process"
	}
	return fmt.Sprintf("ComputeMode(%d)", int(m))
}

// ParseComputeMode reads the nvidia-smi spelling back.
func ParseComputeMode(s string) (ComputeMode, error) {
	for m := ComputeModeDefault; m <= ComputeModeExclusiveProcess; m++ {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unknown compute mode %q", s)
}

// Architecture is NVML's device architecture, with NVML's numbering.
type Architecture int

// Architectures as NVML numbers them.
const (
	ArchKepler    Architecture = 2
	ArchMaxwell   Architecture = 3
	ArchPascal    Architecture = 4
	ArchVolta     Architecture = 5
	ArchTuring    Architecture = 6
	ArchAmpere    Architecture = 7
	ArchAda       Architecture = 8
	ArchHopper    Architecture = 9
	ArchBlackwell Architecture = 10
	ArchUnknown   Architecture = -1
)

// String names the architecture.
func (a Architecture) String() string {
	switch a {
	case ArchKepler:
		return "Kepler"
	case ArchMaxwell:
		return "Maxwell"
	case ArchPascal:
		return "Pascal"
	case ArchVolta:
		return "Volta"
	case ArchTuring:
		return "Turing"
	case ArchAmpere:
		return "Ampere"
	case ArchAda:
		return "Ada"
	case ArchHopper:
		return "Hopper"
	case ArchBlackwell:
		return "Blackwell"
	}
	return "Unknown"
}

// MaxMPSClients is the number of MPS client contexts one device accepts: 48
// from Volta on, 16 before (NVIDIA's MPS documentation). An unknown
// architecture gets the smaller figure, which is safe on every GPU.
func (a Architecture) MaxMPSClients() int {
	if a >= ArchVolta {
		return 48
	}
	return 16
}

// UUID is a physical GPU's UUID as NVML names it ("GPU-5f0c8a52-..."): the
// key the plan, the agent, the accounting and the CDI spec know a GPU by,
// as vdev.Name is a virtual device's. It is written as it is (a row's
// device_path, /status, an MPS pipe directory's name).
type UUID string

// String is the UUID as it is written everywhere.
func (u UUID) String() string { return string(u) }

// Info is what the daemon knows of one physical GPU.
type Info struct {
	// Index is NVML's index; Minor is N of /dev/nvidiaN.
	Index int
	Minor int
	UUID  UUID
	Name  string
	PCI   pci.Address
	// PCIVendorID and PCIDeviceID, e.g. 0x10de and 0x2335.
	PCIVendorID uint16
	PCIDeviceID uint16
	// MemoryTotal is NVML's memory.total.
	MemoryTotal units.Bytes
	// MemoryUsed is what NVML reports in use when the GPU was listed.
	MemoryUsed   units.Bytes
	ComputeMode  ComputeMode
	Architecture Architecture
	// NUMANode is read from sysfs; -1 when unknown.
	NUMANode int
	// PCIeGeneration and PCIeWidth are the maximum link (stable, unlike the
	// current link that drops to Gen1 when the GPU idles); 0 when unknown.
	PCIeGeneration int
	PCIeWidth      int
}

// VendorDeviceID is Cloudpods' "10de:2335" form.
func (i Info) VendorDeviceID() string {
	return fmt.Sprintf("%04x:%04x", i.PCIVendorID, i.PCIDeviceID)
}

// Backend is what the daemon needs of NVML. The NVML adapter implements it for
// real GPUs and for go-nvml's simulated machines.
type Backend interface {
	// Devices lists every GPU NVML sees, sorted by PCI address. NUMANode is
	// left at -1: sysfs fills it (see NUMANode).
	Devices(ctx context.Context) ([]Info, error)
	// SetComputeMode changes a GPU's compute mode. Callers check config first:
	// some hosts (shared machines) must never have it changed.
	SetComputeMode(ctx context.Context, uuid UUID, mode ComputeMode) error
	// MPSProcesses lists the MPS client processes running on the GPU with
	// this UUID and the memory NVML counts for each (the MPS server itself is
	// not among them). A GPU whose driver cannot answer returns an error
	// wrapping ErrNotSupported, never an empty list: "nobody uses memory" and
	// "nobody can tell" must not look alike to accounting.
	MPSProcesses(ctx context.Context, uuid UUID) ([]Process, error)
	// Close releases NVML.
	Close() error
}

// Process is one MPS client process on a GPU as NVML lists it. PID is in the
// host's PID namespace. UsedMemoryBytes is what NVML counts for the process,
// its CUDA context included; it is also what MPS holds against the client's
// pinned memory limit: a client capped at 20389 MiB stopped allocating at
// 20368 MiB used (docs/gpu-runs/mps-probe2.txt).
type Process struct {
	PID             int
	UsedMemoryBytes uint64
}

// ErrNotSupported is wrapped by Backend calls the GPU or driver cannot answer
// at all, as opposed to failing to.
var ErrNotSupported = errors.New("not supported by this GPU or driver")
