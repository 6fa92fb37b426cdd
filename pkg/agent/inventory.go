package agent

import (
	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// listed is a virtual device as the backend holds it after a sync.
type listed struct {
	// Device is the device as planned or, for one out of the plan that a
	// holder still keeps, as the backend holds it (its class as it was
	// last planned, ClassShared when that is not known).
	Device vdev.Device
	// ClassKnown is false for a device out of the plan whose class was
	// never seen by this process (the backend does not hold it).
	ClassKnown bool
	ID         string
	// Holder holds the device (a guest, a claim); empty when free.
	Holder         string
	Healthy        bool
	PendingRemoval bool
	CDIName        string
}

// byName reads the backend's holdings, keyed by device name, and their
// names in the backend's order: a planned device's holding carries that
// device; any other is the device the backend holds.
func (a *Agent) byName(held []backend.Holding, planned map[vdev.Name]vdev.Device) (map[vdev.Name]listed, []vdev.Name) {
	out := make(map[vdev.Name]listed, len(held))
	order := make([]vdev.Name, 0, len(held))
	for _, h := range held {
		l := listed{ID: h.ID, Holder: h.Holder, Healthy: h.Healthy, PendingRemoval: h.PendingRemoval, CDIName: h.CDIName}
		if d, ok := planned[h.Name]; ok {
			l.Device, l.ClassKnown = d, true
		} else if d, known, ok := a.unplannedDevice(h); ok {
			l.Device, l.ClassKnown = d, known
		} else {
			continue
		}
		out[h.Name] = l
		order = append(order, h.Name)
	}
	return out, order
}

// unplannedDevice is the device of holding h, which the plan does not have
// any more: its GPU as listed now (only its UUID when the GPU is gone),
// its caps as the backend holds them, its class as last planned. ok is
// false for a name that is no virtual device's.
func (a *Agent) unplannedDevice(h backend.Holding) (d vdev.Device, classKnown, ok bool) {
	uuid, i, err := vdev.ParseName(string(h.Name))
	if err != nil {
		return vdev.Device{}, false, false
	}
	g, present := a.present[uuid]
	if !present {
		g = gpu.Info{UUID: uuid, Index: -1, Minor: -1}
	}
	d = vdev.Device{GPU: g, Index: i, MemoryLimit: h.MemoryLimit, ThreadPercentage: h.ThreadPercentage}
	d.Class, classKnown = a.classes[d.Name()]
	return d, classKnown, true
}
