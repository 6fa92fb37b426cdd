//go:build cgo

package nvmlsim

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"yunion.io/x/mps-daemon/pkg/gpu"
	gpunvml "yunion.io/x/mps-daemon/pkg/gpu/nvml"
	"yunion.io/x/mps-daemon/pkg/pci"
	"yunion.io/x/mps-daemon/pkg/units"
)

// simDriverVersion is the driver the simulated host claims: the one the MPS
// probes in docs/gpu-runs were taken with.
const simDriverVersion = "580.159.04"

// simModel is one GPU model a simulated host can have: go-nvml's description
// plus the maximum PCIe link, which go-nvml's mock does not know.
type simModel struct {
	config    gpus.Config
	pcieGen   int
	pcieWidth int
}

// simModelFor returns the model a profile names (one of simModelKeys).
func simModelFor(key string) (simModel, bool) {
	switch key {
	case "H100":
		return simModel{gpus.H100_SXM5_80GB, 5, 16}, true
	case "H200":
		return simModel{gpus.H200_SXM5_141GB, 5, 16}, true
	case "A100":
		return simModel{gpus.A100_SXM4_80GB, 4, 16}, true
	case "B200":
		return simModel{gpus.B200_SXM5_180GB, 5, 16}, true
	case "A30":
		return simModel{gpus.A30_PCIE_24GB, 4, 16}, true
	case "P40":
		return simModel{teslaP40(), 3, 16}, true
	}
	return simModel{}, false
}

// teslaP40 is a pre-Volta GPU, which go-nvml has no mock of; it matters
// because MPS allows it 16 clients instead of 48. 22919 MiB is what
// nvidia-smi reports as its memory.total.
func teslaP40() gpus.Config {
	return gpus.Config{
		Name:         "Tesla P40",
		Architecture: nvml.DEVICE_ARCH_PASCAL,
		Brand:        nvml.BRAND_TESLA,
		MemoryMB:     22919,
		CudaMajor:    6,
		CudaMinor:    1,
		PciDeviceId:  0x1B3810DE,
	}
}

// Host describes a simulated host: the GPUs its NVML reports and the fake
// sysfs and /dev tree written for them.
type Host struct {
	profile simProfile
	root    string
	gpus    []*simGPU
}

// simGPU is the state of one simulated GPU, shared by the mock device's
// functions and Host.GPUs.
type simGPU struct {
	// slot is its place in PCI order, index its NVML index, minor N of
	// its /dev/nvidiaN (simOrders).
	slot     int
	index    int
	minor    int
	uuid     gpu.UUID
	addr     pci.Address
	numaNode int
	model    simModel

	mu   sync.Mutex
	mode nvml.ComputeMode
	// root is the simulated host's, where its MPS clients are listed
	// (MPSProcessesPath).
	root string
}

// New builds a simulated host from a profile such as "8xH100" (see
// Profiles), writes its fake sys/ and dev/ tree under root (idempotent:
// the same profile over the same root rewrites the same tree) and returns an
// adapter over it. The same profile always gives the same UUIDs, bus ids and
// order, so a restarted daemon finds the inventory already in sync.
func New(profile, root string, log *slog.Logger) (*gpunvml.Adapter, *Host, error) {
	p, err := parseProfile(profile)
	if err != nil {
		return nil, nil, err
	}
	model, ok := simModelFor(p.model)
	if !ok {
		return nil, nil, fmt.Errorf("simulated GPU profile %q: model %s has no description", profile, p.model)
	}
	if root == "" {
		return nil, nil, fmt.Errorf("simulated host %s: no root directory for its sys/ and dev/ tree", p)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, nil, fmt.Errorf("simulated host %s: root %q: %w", p, root, err)
	}
	host := &Host{profile: p, root: abs}
	for i := range p.count {
		index, minor := simOrders(i, p.count, p.scrambled)
		host.gpus = append(host.gpus, &simGPU{
			slot:     i,
			index:    index,
			minor:    minor,
			uuid:     gpu.UUID(simUUID(p, i)),
			addr:     simAddress(i),
			numaNode: simNUMANode(i, p.count),
			model:    model,
			mode:     nvml.COMPUTEMODE_DEFAULT,
			root:     abs,
		})
	}
	if err := writeSimTree(abs, host.treeGPUs()); err != nil {
		return nil, nil, fmt.Errorf("simulated host %s: %w", p, err)
	}
	srv, err := server.New(
		server.WithGPUs(gpus.Multiple(p.count, model.config)...),
		server.WithDriverVersion(simDriverVersion),
		server.WithNVMLVersion("13."+simDriverVersion),
		server.WithCUDADriverVersion(13000),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("simulated host %s: building go-nvml mock: %w", p, err)
	}
	// NVML's index k is the mock server's device k.
	for _, g := range host.gpus {
		md, ok := srv.Devices[g.index].(*server.Device)
		if !ok {
			return nil, nil, fmt.Errorf("simulated host %s: go-nvml mock device %d is a %T", p, g.index, srv.Devices[g.index])
		}
		g.install(md)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a, err := gpunvml.NewWithLibrary(srv, log.With("simulated", p.String()))
	if err != nil {
		return nil, nil, fmt.Errorf("simulated host %s: %w", p, err)
	}
	return a, host, nil
}

// install makes go-nvml's mock device answer as this GPU. The UUID and bus id
// fields are set too, as the mock server looks devices up by them.
func (g *simGPU) install(d *server.Device) {
	d.UUID = g.uuid.String()
	d.PciBusID = g.addr.NVML()
	d.Minor = g.minor
	d.Index = g.index
	d.GetIndexFunc = func() (int, nvml.Return) { return g.index, nvml.SUCCESS }
	d.GetMinorNumberFunc = func() (int, nvml.Return) { return g.minor, nvml.SUCCESS }
	d.GetUUIDFunc = func() (string, nvml.Return) { return g.uuid.String(), nvml.SUCCESS }
	d.GetNameFunc = func() (string, nvml.Return) { return g.model.config.Name, nvml.SUCCESS }
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return g.pciInfo(), nvml.SUCCESS }
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		total := g.memoryBytes()
		return nvml.Memory{Total: total, Free: total}, nvml.SUCCESS
	}
	d.GetArchitectureFunc = func() (nvml.DeviceArchitecture, nvml.Return) {
		return g.model.config.Architecture, nvml.SUCCESS
	}
	d.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return g.model.pcieGen, nvml.SUCCESS }
	d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return g.model.pcieWidth, nvml.SUCCESS }
	d.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.mode, nvml.SUCCESS
	}
	d.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		procs, err := readMPSProcesses(g.root, g.uuid)
		if err != nil {
			return nil, nvml.ERROR_UNKNOWN
		}
		infos := make([]nvml.ProcessInfo, len(procs))
		for i, p := range procs {
			infos[i] = nvml.ProcessInfo{Pid: uint32(p.PID), UsedGpuMemory: p.UsedMemoryBytes}
		}
		return infos, nvml.SUCCESS
	}
	d.SetComputeModeFunc = func(m nvml.ComputeMode) nvml.Return {
		if m < nvml.COMPUTEMODE_DEFAULT || m >= nvml.COMPUTEMODE_COUNT {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		g.mode = m
		return nvml.SUCCESS
	}
}

// pciInfo is what NVML fills in: bus ids in upper case with 8- and 4-digit
// domains, and the vendor id in the low half of PciDeviceId.
func (g *simGPU) pciInfo() nvml.PciInfo {
	p := nvml.PciInfo{
		Domain:      g.addr.Domain,
		Bus:         uint32(g.addr.Bus),
		Device:      uint32(g.addr.Device),
		PciDeviceId: g.model.config.PciDeviceId,
	}
	gpunvml.PutCString(p.BusId[:], g.addr.NVML())
	gpunvml.PutCString(p.BusIdLegacy[:], fmt.Sprintf("%04X:%02X:%02X.%X", g.addr.Domain, g.addr.Bus, g.addr.Device, g.addr.Function))
	return p
}

func (g *simGPU) memoryBytes() uint64 {
	return g.model.config.MemoryMB * 1024 * 1024
}

// info is what the adapter reports for this GPU.
func (g *simGPU) info() gpu.Info {
	vendor, device := gpunvml.SplitPCIID(g.model.config.PciDeviceId)
	g.mu.Lock()
	mode := g.mode
	g.mu.Unlock()
	return gpu.Info{
		Index:          g.index,
		Minor:          g.minor,
		UUID:           g.uuid,
		Name:           g.model.config.Name,
		PCI:            g.addr,
		PCIVendorID:    vendor,
		PCIDeviceID:    device,
		MemoryTotal:    units.Bytes(g.memoryBytes()),
		ComputeMode:    gpu.ComputeMode(mode),
		Architecture:   gpunvml.Architecture(g.model.config.Architecture),
		NUMANode:       -1,
		PCIeGeneration: g.model.pcieGen,
		PCIeWidth:      g.model.pcieWidth,
	}
}

func (h *Host) treeGPUs() []treeGPU {
	out := make([]treeGPU, len(h.gpus))
	for i, g := range h.gpus {
		vendor, device := gpunvml.SplitPCIID(g.model.config.PciDeviceId)
		out[i] = treeGPU{slot: g.slot, minor: g.minor, addr: g.addr, numaNode: g.numaNode, vendorID: vendor, deviceID: device}
	}
	return out
}

// Profile is the canonical profile, "8xH100", whatever case it was given in.
func (h *Host) Profile() string { return h.profile.String() }

// SysfsRoot is the fake sysfs, to use where the daemon would use /sys.
func (h *Host) SysfsRoot() string { return filepath.Join(h.root, "sys") }

// DevRoot is the fake /dev.
func (h *Host) DevRoot() string { return filepath.Join(h.root, "dev") }

// GPUs is what the adapter reports now, in its order (by PCI address), with
// NUMANode -1 as the adapter leaves it; the node is in the fake sysfs.
func (h *Host) GPUs() []gpu.Info {
	out := make([]gpu.Info, len(h.gpus))
	for i, g := range h.gpus {
		out[i] = g.info()
	}
	return out
}

// SetMPSProcesses sets the MPS clients NVML lists on the GPU with this UUID
// from now on; nil lists none, as a fresh simulated host does. The list is
// the file of MPSProcessesPath, so another process (a test driving a
// daemon started with --simulate) can set it too with WriteMPSProcesses.
// The simulated MPS control (pkg/mps) knows nothing of NVML: a test or the
// simulated host keeps the two in step, as the driver does on a real one.
func (h *Host) SetMPSProcesses(uuid gpu.UUID, procs []gpu.Process) error {
	for _, g := range h.gpus {
		if g.uuid == uuid {
			return WriteMPSProcesses(h.root, g.uuid, procs)
		}
	}
	return fmt.Errorf("simulated host %s: no GPU %s", h.profile, uuid)
}
