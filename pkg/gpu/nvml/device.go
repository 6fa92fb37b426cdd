//go:build cgo

package nvml

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/pci"
	"yunion.io/x/mps-daemon/pkg/units"
)

// Library is the part of nvml.Interface the adapter uses. The real library
// (nvml.New) and go-nvml's mock server both satisfy it.
type Library interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	SystemGetDriverVersion() (string, nvml.Return)
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(int) (nvml.Device, nvml.Return)
	DeviceGetHandleByUUID(string) (nvml.Device, nvml.Return)
}

// device is the part of nvml.Device the adapter uses; a simulated device
// (pkg/gpu/nvmlsim) must set a *Func for each of these, as the mock panics
// on a nil one.
type device interface {
	GetMinorNumber() (int, nvml.Return)
	GetUUID() (string, nvml.Return)
	GetName() (string, nvml.Return)
	GetPciInfo() (nvml.PciInfo, nvml.Return)
	GetMemoryInfo() (nvml.Memory, nvml.Return)
	GetComputeMode() (nvml.ComputeMode, nvml.Return)
	SetComputeMode(nvml.ComputeMode) nvml.Return
	GetArchitecture() (nvml.DeviceArchitecture, nvml.Return)
	GetMaxPcieLinkGeneration() (int, nvml.Return)
	GetMaxPcieLinkWidth() (int, nvml.Return)
	GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return)
}

var (
	_ Library = nvml.Interface(nil)
	_ device  = nvml.Device(nil)
)

// callError names the NVML function that failed. The Return is wrapped, so
// errors.Is(err, nvml.ERROR_GPU_IS_LOST) works; its text is NVML's own
// ("GPU is lost") once the real library is loaded.
func callError(call string, ret nvml.Return) error {
	return fmt.Errorf("%s: %w", call, ret)
}

// unsupported reports whether ret means the GPU or driver cannot answer this
// question at all, as opposed to failing to.
func unsupported(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND
}

// readDevice asks NVML everything gpu.Info holds except the NUMA node, which
// sysfs knows. The caller wraps errors with the index and UUID.
func readDevice(d device, index int) (gpu.Info, error) {
	info := gpu.Info{Index: index, NUMANode: -1}
	var ret nvml.Return
	uuid, ret := d.GetUUID()
	if ret != nvml.SUCCESS {
		return info, callError("nvmlDeviceGetUUID", ret)
	}
	info.UUID = gpu.UUID(uuid)
	if info.Minor, ret = d.GetMinorNumber(); ret != nvml.SUCCESS {
		return info, callError("nvmlDeviceGetMinorNumber", ret)
	}
	if info.Name, ret = d.GetName(); ret != nvml.SUCCESS {
		return info, callError("nvmlDeviceGetName", ret)
	}
	p, ret := d.GetPciInfo()
	if ret != nvml.SUCCESS {
		return info, callError("nvmlDeviceGetPciInfo", ret)
	}
	addr, err := pciAddress(p)
	if err != nil {
		return info, fmt.Errorf("nvmlDeviceGetPciInfo: %w", err)
	}
	info.PCI = addr
	info.PCIVendorID, info.PCIDeviceID = SplitPCIID(p.PciDeviceId)
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return info, callError("nvmlDeviceGetMemoryInfo", ret)
	}
	info.MemoryTotal = units.Bytes(mem.Total)
	info.MemoryUsed = units.Bytes(mem.Used)
	mode, ret := d.GetComputeMode()
	if ret != nvml.SUCCESS {
		return info, callError("nvmlDeviceGetComputeMode", ret)
	}
	info.ComputeMode = gpu.ComputeMode(mode)
	arch, ret := d.GetArchitecture()
	switch {
	case ret == nvml.SUCCESS:
		info.Architecture = Architecture(arch)
	case unsupported(ret):
		info.Architecture = gpu.ArchUnknown
	default:
		return info, callError("nvmlDeviceGetArchitecture", ret)
	}
	if info.PCIeGeneration, err = optionalInt("nvmlDeviceGetMaxPcieLinkGeneration", d.GetMaxPcieLinkGeneration); err != nil {
		return info, err
	}
	if info.PCIeWidth, err = optionalInt("nvmlDeviceGetMaxPcieLinkWidth", d.GetMaxPcieLinkWidth); err != nil {
		return info, err
	}
	return info, nil
}

// optionalInt calls an NVML getter whose answer may legitimately be missing
// (a GPU behind a virtual PCIe bridge has no link to report): 0 then.
func optionalInt(call string, get func() (int, nvml.Return)) (int, error) {
	v, ret := get()
	switch {
	case ret == nvml.SUCCESS:
		return v, nil
	case unsupported(ret):
		return 0, nil
	}
	return 0, callError(call, ret)
}

// pciAddress parses NVML's bus id ("00000000:2A:00.0"), falling back to the
// legacy field with a 4-digit domain should a driver leave the long one empty.
func pciAddress(p nvml.PciInfo) (pci.Address, error) {
	id := cString(p.BusId[:])
	if id == "" {
		id = cString(p.BusIdLegacy[:])
	}
	if id == "" {
		return pci.Address{}, errors.New("empty PCI bus id")
	}
	return pci.Parse(id)
}

// SplitPCIID splits NVML's PciDeviceId, which packs the device id in the high
// half and the vendor id in the low half: 0x233510DE is 10de:2335.
func SplitPCIID(id uint32) (vendor, device uint16) {
	return uint16(id & 0xffff), uint16(id >> 16)
}

// cString reads a NUL-terminated C char array as go-nvml hands them over
// ([32]int8 on most platforms, uint8 where char is unsigned).
func cString[T ~int8 | ~uint8](b []T) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

// PutCString writes s into a C char array, NUL-terminated and truncated to
// fit, as NVML fills its fixed-size fields.
func PutCString[T ~int8 | ~uint8](dst []T, s string) {
	clear(dst)
	n := min(len(s), len(dst)-1)
	for i := range n {
		dst[i] = T(s[i])
	}
}

// Architecture maps NVML's numbering onto gpu.Architecture; anything newer
// than this code knows is ArchUnknown, which gets the safe MPS client limit.
func Architecture(a nvml.DeviceArchitecture) gpu.Architecture {
	switch a {
	case nvml.DEVICE_ARCH_KEPLER:
		return gpu.ArchKepler
	case nvml.DEVICE_ARCH_MAXWELL:
		return gpu.ArchMaxwell
	case nvml.DEVICE_ARCH_PASCAL:
		return gpu.ArchPascal
	case nvml.DEVICE_ARCH_VOLTA:
		return gpu.ArchVolta
	case nvml.DEVICE_ARCH_TURING:
		return gpu.ArchTuring
	case nvml.DEVICE_ARCH_AMPERE:
		return gpu.ArchAmpere
	case nvml.DEVICE_ARCH_ADA:
		return gpu.ArchAda
	case nvml.DEVICE_ARCH_HOPPER:
		return gpu.ArchHopper
	case nvml.DEVICE_ARCH_BLACKWELL:
		return gpu.ArchBlackwell
	}
	return gpu.ArchUnknown
}
