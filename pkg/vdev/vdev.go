// Package vdev is the arithmetic of splitting one physical GPU into N MPS
// virtual devices: each capped at memory.total / N (integer division, as
// Cloudpods' host agent computes it, so the inventory rows match), given the
// share of the SMs the host's thread policy sets (config.ThreadPolicy) or
// its QoS class (qos.go), and numbered from 0 as Cloudpods numbers slices.
package vdev

import (
	"fmt"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/gpu"
)

// MemoryLimitMiB is the memory cap of one of n virtual devices of a GPU with
// totalMiB of memory. Rounding down keeps the n caps within the card. It is 0
// when n < 1.
func MemoryLimitMiB(totalMiB, n int) int {
	if n < 1 {
		return 0
	}
	return totalMiB / n
}

// Device is one virtual device: a slice of a physical GPU.
type Device struct {
	GPU gpu.Info
	// Index is the slice number, from 0.
	Index int
	// Addr is Cloudpods' addr: the GPU's PCI address without domain, "-",
	// the slice number ("1a:00.0-3").
	Addr             string
	MemoryLimitMiB   int
	MemoryTotalMiB   int
	ThreadPercentage int
	// Class is the device's QoS class (qos.go); ClassShared on a GPU
	// without mps_qos.
	Class Class
}

// split divides g into n devices of threadPct percent each; nil when n < 1.
func split(g gpu.Info, n, threadPct int) []Device {
	if n < 1 {
		return nil
	}
	total := g.MemoryTotalMiB()
	devs := make([]Device, n)
	for i := range devs {
		devs[i] = Device{
			GPU:              g,
			Index:            i,
			Addr:             fmt.Sprintf("%s-%d", g.PCI.Short(), i),
			MemoryLimitMiB:   MemoryLimitMiB(total, n),
			MemoryTotalMiB:   total,
			ThreadPercentage: threadPct,
		}
	}
	return devs
}

// API is the inventory row of d on host hostID. The name is left empty: the
// inventory or the operator names devices. index and device_minor are -1 as
// Cloudpods writes them for MPS devices; device_path is the GPU UUID, which
// is what containers get in NVIDIA_VISIBLE_DEVICES.
func (d Device) API(hostID string) api.IsolatedDevice {
	return api.IsolatedDevice{
		HostID:              hostID,
		DevType:             api.DevTypeNvidiaMPS,
		Model:               d.GPU.Name,
		Addr:                d.Addr,
		VendorDeviceID:      d.GPU.VendorDeviceID(),
		DevicePath:          d.GPU.UUID,
		NumaNode:            d.GPU.NUMANode,
		PCIEInfo:            api.PCIEInfoOf(d.GPU.PCIeGeneration, d.GPU.PCIeWidth),
		Index:               -1,
		DeviceMinor:         -1,
		MPSMemoryLimit:      d.MemoryLimitMiB,
		MPSMemoryTotal:      d.MemoryTotalMiB,
		MPSThreadPercentage: d.ThreadPercentage,
	}
}
