// Package vdev is the arithmetic of splitting one physical GPU into N MPS
// virtual devices: each capped at memory.total / N (integer division, as
// Cloudpods' host agent computes it, so the inventory rows match), given the
// share of the SMs the host's thread policy sets (config.ThreadPolicy) or
// its QoS class (qos.go), and numbered from 0 as Cloudpods numbers slices.
//
// Device is the one form of a virtual device from the plan to the edges:
// the MPS limits, the CDI spec (cdi.Device adds where its container finds
// MPS), the inventory row and the status are all made from it.
package vdev

import (
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/units"
)

// MemoryLimit is the memory cap of one of n virtual devices of a GPU with
// total memory. Rounding down keeps the n caps within the card. It is 0
// when n < 1.
func MemoryLimit(total units.MiB, n int) units.MiB {
	if n < 1 {
		return 0
	}
	return total / units.MiB(n)
}

// Device is one virtual device: a slice of a physical GPU.
type Device struct {
	GPU gpu.Info
	// Index is the slice number, from 0.
	Index int
	// MemoryLimit is the device's cap: memory.total / N (MemoryLimit).
	MemoryLimit units.MiB
	// ThreadPercentage is the share of the GPU's SMs its clients may use.
	ThreadPercentage int
	// Class is the device's QoS class (qos.go); ClassShared on a GPU
	// without mps_qos.
	Class Class
}

// Addr is Cloudpods' addr of d: its GPU's PCI address without domain, "-",
// the slice number ("1a:00.0-3").
func (d Device) Addr() string { return api.SliceAddr(d.GPU.PCI.Short(), d.Index) }

// Name is d's stable name (NameOf).
func (d Device) Name() Name { return NameOf(d.GPU.UUID, d.Index) }

// split divides g into n devices of threadPct percent each; nil when n < 1.
func split(g gpu.Info, n, threadPct int) []Device {
	if n < 1 {
		return nil
	}
	limit := MemoryLimit(g.MemoryTotal.MiB(), n)
	devs := make([]Device, n)
	for i := range devs {
		devs[i] = Device{GPU: g, Index: i, MemoryLimit: limit, ThreadPercentage: threadPct}
	}
	return devs
}
