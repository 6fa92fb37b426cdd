package agent

import (
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// The inventory speaks Cloudpods' rows (pkg/api). This file is the one
// place the agent translates: its virtual devices into rows for the sync,
// and the rows the sync answers with into what the agent needs to know of
// each device, by name. Nothing else in the agent reads a row's fields.

// rowOf is the inventory row of virtual device d. The host is the
// backend's to fill, the name is left empty: the inventory or the operator
// names devices. index and device_minor are -1 as Cloudpods writes them
// for MPS devices; device_path is the GPU UUID, which is what containers
// get in NVIDIA_VISIBLE_DEVICES.
func rowOf(d vdev.Device, healthy bool) api.IsolatedDevice {
	return api.IsolatedDevice{
		DevType:             api.DevTypeNvidiaMPS,
		Model:               d.GPU.Name,
		Addr:                d.Addr(),
		VendorDeviceID:      d.GPU.VendorDeviceID(),
		DevicePath:          d.GPU.UUID.String(),
		NumaNode:            d.GPU.NUMANode,
		PCIEInfo:            api.PCIEInfoOf(d.GPU.PCIeGeneration, d.GPU.PCIeWidth),
		Index:               -1,
		DeviceMinor:         -1,
		MPSMemoryLimit:      int(d.MemoryLimit),
		MPSMemoryTotal:      int(d.GPU.MemoryTotal.MiB()),
		MPSThreadPercentage: d.ThreadPercentage,
		Unhealthy:           !healthy,
		CDIName:             CDIName(d.Name()),
	}
}

// listed is a virtual device as the inventory holds it after a sync.
type listed struct {
	// Device is the device as planned or, for one out of the plan that a
	// guest still holds, as its row describes it (its class as it was last
	// planned, ClassShared when that is not known).
	Device vdev.Device
	// ClassKnown is false for a device out of the plan whose class was
	// never seen by this process (its row does not carry it).
	ClassKnown bool
	ID         string
	// Guest holds the device; empty when free.
	Guest          string
	Healthy        bool
	PendingRemoval bool
	CDIName        string
}

// byName reads the rows a sync answered with, keyed by device name, and
// their names in the sync's order: a row of a planned device carries that
// device; any other is read back from its addr and device_path (GPU UUID).
// A row shaped otherwise (not a slice of a GPU) names no device of ours
// and is left out.
func (a *Agent) byName(rows []api.IsolatedDevice, planned map[vdev.Name]vdev.Device) (map[vdev.Name]listed, []vdev.Name) {
	out := make(map[vdev.Name]listed, len(rows))
	order := make([]vdev.Name, 0, len(rows))
	for _, r := range rows {
		_, i, ok := api.ParseSliceAddr(r.Addr)
		if !ok || r.DevicePath == "" {
			continue
		}
		name := vdev.NameOf(gpu.UUID(r.DevicePath), i)
		l := listed{ID: r.ID, Guest: r.GuestID, Healthy: !r.Unhealthy, PendingRemoval: r.PendingRemoval, CDIName: r.CDIName}
		if d, ok := planned[name]; ok {
			l.Device, l.ClassKnown = d, true
		} else {
			l.Device, l.ClassKnown = a.unplannedDevice(r, i)
		}
		out[name] = l
		order = append(order, name)
	}
	return out, order
}

// unplannedDevice is the device of row r (slice i), which the plan does not
// have any more: its GPU as listed now (only its UUID when the GPU is
// gone), its caps from the row, its class as last planned.
func (a *Agent) unplannedDevice(r api.IsolatedDevice, i int) (d vdev.Device, classKnown bool) {
	g, ok := a.present[gpu.UUID(r.DevicePath)]
	if !ok {
		g = gpu.Info{UUID: gpu.UUID(r.DevicePath), Index: -1, Minor: -1}
	}
	d = vdev.Device{GPU: g, Index: i, MemoryLimit: units.MiB(r.MPSMemoryLimit), ThreadPercentage: r.MPSThreadPercentage}
	d.Class, classKnown = a.classes[d.Name()]
	return d, classKnown
}
