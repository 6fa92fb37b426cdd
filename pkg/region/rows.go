package region

import (
	"encoding/json"
	"maps"

	"yunion.io/x/mps-daemon/pkg/api"
)

// The region's rows of a host's MPS devices, in either data model
// (ModelPerSlice, ModelGPU): how the virtual devices become rows, what
// Cloudpods' host agent sends for one and when it deems one current, and
// the virtual devices a row answered stands for. sync.go moves them.

// Cloudpods' names in the rows (pkg/apis/compute).
const (
	devTypeGPU     = "GPU"
	devTypeMPS     = api.DevTypeNvidiaMPS
	sharingModeMPS = "MPS"
	guestIDUnknown = "(a guest)"
)

// row is an isolated_devices row as the region answers it (details=true):
// the device record, and what the region adds.
type row struct {
	api.IsolatedDevice
	AllocatedCount int `json:"allocated_count"`
	// Guest and GuestStatus: a list in master, a name before.
	Guest       json.RawMessage `json:"guest"`
	GuestStatus json.RawMessage `json:"guest_status"`
	// devs are the virtual devices a wanted row stands for.
	devs []api.IsolatedDevice
}

// guests are the names (or ids) of the guests holding the row, at least
// AllocatedCount of them.
func (r row) guests() []string {
	var names []string
	if err := json.Unmarshal(r.Guest, &names); err != nil {
		var one string
		if json.Unmarshal(r.Guest, &one) == nil && one != "" {
			names = []string{one}
		}
	}
	if len(names) == 0 && r.GuestID != "" {
		names = []string{r.GuestID}
	}
	for len(names) < r.AllocatedCount {
		names = append(names, guestIDUnknown)
	}
	return names
}

// desiredRows turns the virtual devices into the rows of the model: the
// same rows for the per-slice model, one per GPU (in first-seen order) for
// the GPU-row model.
func desiredRows(model string, desired []api.IsolatedDevice) []row {
	var out []row
	if model == ModelPerSlice {
		for _, d := range desired {
			out = append(out, row{IsolatedDevice: d, devs: []api.IsolatedDevice{d}}) // dev_type NVIDIA_MPS (Desired)
		}
		return out
	}
	byGPU := map[string]int{}
	for _, d := range desired {
		i, ok := byGPU[d.DevicePath]
		if !ok {
			r := row{IsolatedDevice: d}
			r.DevType, r.SharingMode, r.Addr = devTypeGPU, sharingModeMPS, gpuAddr(d.Addr)
			r.MemorySize = d.MPSMemoryLimit
			i, byGPU[d.DevicePath] = len(out), len(out)
			out = append(out, r)
		}
		out[i].devs = append(out[i].devs, d)
		out[i].VirtualNum = len(out[i].devs)
	}
	return out
}

// gpuAddr is a slice's addr without its "-<i>": the GPU's.
func gpuAddr(sliceAddr string) string {
	if gpu, _, ok := api.ParseSliceAddr(sliceAddr); ok {
		return gpu
	}
	return sliceAddr
}

// body is what Cloudpods' host agent sends for the row
// (isolated_device.GetApiResourceData): the record's fields it sends
// (api.HostAgentFields) and its constants.
func (r row) body(model, hostID string) map[string]any {
	// sharing_mode: a region of 4.0.3 has no such column and ignores it; a
	// newer one that accepts NVIDIA_MPS through an isolated-device model
	// requires it.
	m := map[string]any{"detected_on_host": true, "sharing_mode": sharingModeMPS}
	maps.Copy(m, api.HostAgentFields(r.IsolatedDevice))
	if model == ModelGPU {
		m["virtual_num"], m["hot_pluggable"] = r.VirtualNum, false
		if r.MemorySize > 0 {
			m["memory_size"] = r.MemorySize
		}
	}
	if hostID != "" {
		m["host_id"] = hostID
	}
	return m
}

// needsUpdate is Cloudpods' host agent's own test (CheckDevIsNeedUpdate,
// for the fields an MPS device has), so that the two agents agree on when
// a row is current: the fields it sends differ (a "once" field, pcie_info,
// only when the region has none), and in the GPU-row model its constants.
func needsUpdate(model string, cur, want row) bool {
	if api.HostAgentChanged(cur.IsolatedDevice, want.IsolatedDevice) {
		return true
	}
	if model == ModelGPU {
		return (want.MemorySize > 0 && cur.MemorySize != want.MemorySize) || cur.VirtualNum != want.VirtualNum ||
			cur.HotPluggable || cur.SharingMode != want.SharingMode
	}
	return false
}

// slices are the virtual devices a row stands for, with, for the first
// AllocatedCount of them, who holds one; attached beyond N (after a shrink)
// are pending removal. A per-slice row's id is its device's; the slices of a
// GPU row have none of their own (the region attaches guests to the GPU
// row), so they are named by <GPU UUID>::<i> alone.
func (w row) slices(model string, r row) []api.IsolatedDevice {
	guests := r.guests()
	id := r.ID
	if model == ModelGPU {
		id = ""
	}
	out := make([]api.IsolatedDevice, 0, len(w.devs))
	for i, d := range w.devs {
		d.ID, d.HostID = id, r.HostID
		if i < len(guests) {
			d.GuestID = guests[i]
		}
		out = append(out, d)
	}
	for i := len(w.devs); i < len(guests); i++ {
		extra := w.devs[len(w.devs)-1]
		extra.ID, extra.HostID, extra.GuestID, extra.PendingRemoval = id, r.HostID, guests[i], true
		extra.Addr = api.SliceAddr(gpuAddr(extra.Addr), i)
		out = append(out, extra)
	}
	return out
}

// held is r, no longer wanted but held, as a wanted row of its first
// device: its slices are then one per guest (at least one: the region
// refused the purge, someone holds it).
func (r row) held(model string) row {
	d := r.IsolatedDevice
	d.DevType, d.Index, d.DeviceMinor = api.DevTypeNvidiaMPS, -1, -1
	if model == ModelGPU {
		d.Addr = api.SliceAddr(r.Addr, 0)
	}
	if len(r.guests()) == 0 {
		d.GuestID = guestIDUnknown
	}
	return row{devs: []api.IsolatedDevice{d}}
}
