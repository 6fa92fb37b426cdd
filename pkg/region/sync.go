package region

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/devsync"
)

// Cloudpods' names in the rows (pkg/apis/compute).
const (
	devTypeGPU     = "GPU"
	devTypeMPS     = api.DevTypeNvidiaMPS
	sharingModeMPS = "MPS"
	guestIDUnknown = "(a guest)"
	pathDevices    = "/isolated_devices"
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

// SyncDevices makes the host's MPS rows in the region match desired (one
// api.IsolatedDevice per virtual device, as for mps-inventory), in the data
// model the region speaks, with devsync.Sync as Cloudpods' host agent syncs:
// a row a guest holds is never purged (Held); in the GPU-row model its
// virtual_num never drops below the number of slices attached. The result
// lists the virtual devices as the agent knows them (a GPU row stands for
// its N slices).
func (b *Backend) SyncDevices(ctx context.Context, hostID string, desired []api.IsolatedDevice) (devsync.Result, error) {
	desired, err := devsync.Desired(hostID, desired)
	if err != nil {
		return devsync.Result{}, err
	}
	model, err := b.deviceModel(ctx, hostID)
	if err != nil {
		return devsync.Result{}, err
	}
	want := desiredRows(model, desired)
	for i := range want {
		want[i].Model = b.o.Models.Model(want[i].VendorDeviceID, want[i].Model)
	}
	return devsync.Sync(ctx, hostRows{b, model, hostID}, want)
}

// hostRows are a host's MPS rows of one model in the region, a devsync.Port.
type hostRows struct {
	b             *Backend
	model, hostID string
}

func (p hostRows) Key(r row) (devsync.Key, string) { return devsync.KeyOf(r.IsolatedDevice), r.ID }

// List lists the host's MPS rows of the model as the host agent lists its
// devices (details, no limit, scope system), less a GPU of another sharing
// mode (another agent's).
func (p hostRows) List(ctx context.Context) ([]row, error) {
	devType := devTypeMPS
	if p.model == ModelGPU {
		devType = devTypeGPU
	}
	var list struct {
		Devices []row `json:"isolated_devices"`
	}
	if err := p.b.c.call(ctx, http.MethodGet, pathDevices, rowsQuery(p.hostID, devType), nil, &list); err != nil {
		return nil, fmt.Errorf("listing the host's isolated devices in the region: %w", err)
	}
	var out []row
	for _, r := range list.Devices {
		if r.HostID == p.hostID && r.DevType == devType && r.MdevID == "" && (p.model != ModelGPU || r.SharingMode == sharingModeMPS) {
			out = append(out, r)
		}
	}
	return out, nil
}

func (p hostRows) Create(ctx context.Context, w row) ([]api.IsolatedDevice, error) {
	created, err := p.send(ctx, http.MethodPost, pathDevices, w.body(p.model, p.hostID))
	if err != nil {
		return nil, fmt.Errorf("registering %s %s with the region: %w", p.model, w.Addr, err)
	}
	p.b.log.Debug("created isolated device in the region", "addr", w.Addr, "id", created.ID)
	return w.slices(p.model, created), nil
}

func (p hostRows) Update(ctx context.Context, cur, w row) ([]api.IsolatedDevice, bool, error) {
	if p.model == ModelGPU && cur.AllocatedCount > w.VirtualNum {
		p.b.log.Info("GPU row held by more guests than the new virtual_number: its virtual_num stays at the number attached until they release it",
			"addr", cur.Addr, "attached", cur.AllocatedCount, "virtual_number", w.VirtualNum)
		w.VirtualNum = cur.AllocatedCount
	}
	if !needsUpdate(p.model, cur, w) {
		return w.slices(p.model, cur), false, nil
	}
	updated, err := p.send(ctx, http.MethodPut, pathDevices+"/"+url.PathEscape(cur.ID), w.body(p.model, ""))
	if err != nil {
		return nil, false, fmt.Errorf("updating %s %s (%s) in the region: %w", p.model, cur.Addr, cur.ID, err)
	}
	p.b.log.Debug("updated isolated device in the region", "addr", cur.Addr, "id", cur.ID)
	updated.AllocatedCount, updated.Guest, updated.GuestID = cur.AllocatedCount, cur.Guest, cur.GuestID
	return w.slices(p.model, updated), true, nil
}

// Remove purges r. A 404 is a row gone already, or one purged whose
// follow-up call found no scheduler (a region without one answers so after
// deleting the row): gone either way.
func (p hostRows) Remove(ctx context.Context, r row) ([]api.IsolatedDevice, error) {
	err := p.b.c.call(ctx, http.MethodPost, pathDevices+"/"+url.PathEscape(r.ID)+"/purge", nil, wrap(map[string]any{}), nil)
	switch {
	case err == nil, isNotFound(err):
		p.b.log.Debug("purged isolated device from the region", "addr", r.Addr, "id", r.ID)
		return nil, nil
	case isUsedByServer(err):
		p.b.log.Info("kept an isolated device a guest holds", "addr", r.Addr, "id", r.ID, "guests", r.guests())
		return r.held(p.model).slices(p.model, r), devsync.ErrHeld
	}
	return nil, fmt.Errorf("purging %s (%s) from the region: %w", r.Addr, r.ID, err)
}

func wrap(body map[string]any) map[string]any { return map[string]any{"isolated_device": body} }

// send sends a row's body and reads the row the region answers.
func (p hostRows) send(ctx context.Context, method, path string, body map[string]any) (row, error) {
	var ans struct {
		Device row `json:"isolated_device"`
	}
	err := p.b.c.call(ctx, method, path, nil, wrap(body), &ans)
	return ans.Device, err
}

// rowsQuery lists the host's rows of devType, every one (limit 0).
func rowsQuery(hostID, devType string) url.Values {
	return url.Values{"host": {hostID}, "scope": {"system"}, "details": {"true"}, "limit": {"0"}, "dev_type": {devType}}
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
