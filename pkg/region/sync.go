package region

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/client"
)

// Cloudpods' names in the rows (pkg/apis/compute).
const (
	devTypeGPU     = "GPU"
	devTypeMPS     = api.DevTypeNvidiaMPS
	sharingModeMPS = "MPS"
	guestIDUnknown = "(a guest)"
	pathDevices    = "/isolated_devices"
)

// row is an isolated_devices row as the region answers it (details=true).
type row struct {
	ID                  string          `json:"id"`
	HostID              string          `json:"host_id"`
	DevType             string          `json:"dev_type"`
	SharingMode         string          `json:"sharing_mode"`
	Model               string          `json:"model"`
	Addr                string          `json:"addr"`
	VendorDeviceID      string          `json:"vendor_device_id"`
	MdevID              string          `json:"mdev_id"`
	DevicePath          string          `json:"device_path"`
	NumaNode            int             `json:"numa_node"`
	PCIEInfo            *api.PCIEInfo   `json:"pcie_info"`
	VirtualNum          int             `json:"virtual_num"`
	HotPluggable        bool            `json:"hot_pluggable"`
	MemorySize          int             `json:"memory_size"`
	MPSMemoryLimit      int             `json:"mps_memory_limit"`
	MPSMemoryTotal      int             `json:"mps_memory_total"`
	MPSThreadPercentage int             `json:"mps_thread_percentage"`
	GuestID             string          `json:"guest_id"`
	AllocatedCount      int             `json:"allocated_count"`
	Guest               json.RawMessage `json:"guest"` // a list in master, a name before
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

type key struct{ vendorDeviceID, addr string }

func keyOf(r row) key { return key{r.VendorDeviceID, r.Addr} }

// SyncDevices makes the host's MPS rows in the region match desired (one
// api.IsolatedDevice per virtual device, as for mps-inventory), in the data
// model the region speaks, matching rows on vendor_device_id + addr as
// Cloudpods' host agent does: missing rows are created, changed ones
// updated, rows no longer wanted purged. A row a guest holds is never
// purged (Held); in the GPU-row model its virtual_num never drops below the
// number of slices attached. The result lists the virtual devices as the
// agent knows them (a GPU row stands for its N slices).
func (b *Backend) SyncDevices(ctx context.Context, hostID string, desired []api.IsolatedDevice) (client.SyncResult, error) {
	var res client.SyncResult
	if hostID == "" {
		return res, fmt.Errorf("syncing devices: empty host id")
	}
	model, err := b.deviceModel(ctx, hostID)
	if err != nil {
		return res, err
	}
	want := desiredRows(model, hostID, desired)
	for _, w := range want {
		w.row.Model = b.o.Models.Model(w.row.VendorDeviceID, w.row.Model)
	}
	existing, err := b.hostRows(ctx, hostID, model)
	if err != nil {
		return res, err
	}
	byKey := map[key]row{}
	for _, r := range existing {
		byKey[keyOf(r)] = r
	}
	wanted := map[key]bool{}
	for _, w := range want {
		wanted[keyOf(w.row)] = true
		cur, ok := byKey[keyOf(w.row)]
		if !ok {
			var created struct {
				Device row `json:"isolated_device"`
			}
			if err := b.c.call(ctx, http.MethodPost, pathDevices, nil, wrap(w.body(model, hostID)), &created); err != nil {
				return res, fmt.Errorf("registering %s %s with the region: %w", model, w.row.Addr, err)
			}
			res.Created++
			b.log.Debug("created isolated device in the region", "addr", w.row.Addr, "id", created.Device.ID)
			res.Devices = append(res.Devices, w.slices(model, created.Device)...)
			continue
		}
		if model == ModelGPU && cur.AllocatedCount > w.row.VirtualNum {
			b.log.Info("GPU row held by more guests than the new virtual_number: its virtual_num stays at the number attached until they release it",
				"addr", cur.Addr, "attached", cur.AllocatedCount, "virtual_number", w.row.VirtualNum)
			w.row.VirtualNum = cur.AllocatedCount
		}
		if !needsUpdate(model, cur, w.row) {
			res.Unchanged++
			res.Devices = append(res.Devices, w.slices(model, cur)...)
			continue
		}
		var updated struct {
			Device row `json:"isolated_device"`
		}
		if err := b.c.call(ctx, http.MethodPut, pathDevices+"/"+url.PathEscape(cur.ID), nil, wrap(w.body(model, "")), &updated); err != nil {
			return res, fmt.Errorf("updating %s %s (%s) in the region: %w", model, cur.Addr, cur.ID, err)
		}
		res.Updated++
		b.log.Debug("updated isolated device in the region", "addr", cur.Addr, "id", cur.ID)
		updated.Device.AllocatedCount, updated.Device.Guest, updated.Device.GuestID = cur.AllocatedCount, cur.Guest, cur.GuestID
		res.Devices = append(res.Devices, w.slices(model, updated.Device)...)
	}
	for _, r := range existing {
		if wanted[keyOf(r)] {
			continue
		}
		err := b.c.call(ctx, http.MethodPost, pathDevices+"/"+url.PathEscape(r.ID)+"/purge", nil, wrap(map[string]any{}), nil)
		switch {
		case err == nil, isNotFound(err):
			// A 404 is a row gone already, or one purged whose follow-up
			// call found no scheduler (a region without one answers so
			// after deleting the row): gone either way.
			res.Deleted++
			b.log.Debug("purged isolated device from the region", "addr", r.Addr, "id", r.ID)
		case isUsedByServer(err):
			res.Held = append(res.Held, r.ID)
			res.Devices = append(res.Devices, heldSlices(model, r)...)
			b.log.Info("kept an isolated device a guest holds", "addr", r.Addr, "id", r.ID, "guests", r.guests())
		default:
			return res, fmt.Errorf("purging %s (%s) from the region: %w", r.Addr, r.ID, err)
		}
	}
	return res, nil
}

func wrap(body map[string]any) map[string]any { return map[string]any{"isolated_device": body} }

// hostRows lists the host's MPS rows of the model, as the host agent lists
// its devices (details, no limit, scope system).
func (b *Backend) hostRows(ctx context.Context, hostID, model string) ([]row, error) {
	devType := devTypeMPS
	if model == ModelGPU {
		devType = devTypeGPU
	}
	var list struct {
		Devices []row `json:"isolated_devices"`
	}
	if err := b.c.call(ctx, http.MethodGet, pathDevices, rowsQuery(hostID, devType), nil, &list); err != nil {
		return nil, fmt.Errorf("listing the host's isolated devices in the region: %w", err)
	}
	var out []row
	for _, r := range list.Devices {
		if r.HostID != hostID || r.DevType != devType || r.MdevID != "" {
			continue
		}
		if model == ModelGPU && r.SharingMode != sharingModeMPS {
			continue // a GPU of another sharing mode is another agent's
		}
		out = append(out, r)
	}
	return out, nil
}

// rowsQuery lists the host's rows of devType, every one (limit 0).
func rowsQuery(hostID, devType string) url.Values {
	return url.Values{"host": {hostID}, "scope": {"system"}, "details": {"true"}, "limit": {"0"}, "dev_type": {devType}}
}

// wantRow is one row the host wants, with the virtual devices it stands for.
type wantRow struct {
	row  row
	devs []api.IsolatedDevice
}

// desiredRows turns the virtual devices into the rows of the model: the
// same rows for the per-slice model, one per GPU (in first-seen order) for
// the GPU-row model.
func desiredRows(model, hostID string, desired []api.IsolatedDevice) []*wantRow {
	var out []*wantRow
	if model == ModelPerSlice {
		for _, d := range desired {
			r := rowOf(d)
			r.DevType = devTypeMPS
			out = append(out, &wantRow{row: r, devs: []api.IsolatedDevice{d}})
		}
		return out
	}
	byGPU := map[string]*wantRow{}
	for _, d := range desired {
		w, ok := byGPU[d.DevicePath]
		if !ok {
			r := rowOf(d)
			r.DevType, r.SharingMode, r.Addr = devTypeGPU, sharingModeMPS, gpuAddr(d.Addr)
			r.MemorySize = d.MPSMemoryLimit
			w = &wantRow{row: r}
			byGPU[d.DevicePath] = w
			out = append(out, w)
		}
		w.devs = append(w.devs, d)
		w.row.VirtualNum = len(w.devs)
	}
	return out
}

func rowOf(d api.IsolatedDevice) row {
	return row{
		Model: d.Model, Addr: d.Addr, VendorDeviceID: d.VendorDeviceID, DevicePath: d.DevicePath,
		NumaNode: d.NumaNode, PCIEInfo: d.PCIEInfo, MPSMemoryLimit: d.MPSMemoryLimit,
		MPSMemoryTotal: d.MPSMemoryTotal, MPSThreadPercentage: d.MPSThreadPercentage,
	}
}

// gpuAddr is a slice's addr without its "-<i>": the GPU's.
func gpuAddr(sliceAddr string) string {
	if gpu, _, ok := api.ParseSliceAddr(sliceAddr); ok {
		return gpu
	}
	return sliceAddr
}

// body is what Cloudpods' host agent sends for the row
// (isolated_device.GetApiResourceData): the same keys, left out where it
// leaves them out (index and device_minor -1, empty paths, zero MPS fields).
func (w *wantRow) body(model, hostID string) map[string]any {
	r := w.row
	m := map[string]any{
		"dev_type": r.DevType, "addr": r.Addr, "model": r.Model, "vendor_device_id": r.VendorDeviceID,
		"detected_on_host": true, "numa_node": r.NumaNode,
	}
	// sharing_mode: a region of 4.0.3 has no such column and ignores it; a
	// newer one that accepts NVIDIA_MPS through an isolated-device model
	// requires it.
	m["sharing_mode"] = sharingModeMPS
	if model == ModelGPU {
		m["virtual_num"], m["hot_pluggable"] = r.VirtualNum, false
		if r.MemorySize > 0 {
			m["memory_size"] = r.MemorySize
		}
	}
	if hostID != "" {
		m["host_id"] = hostID
	}
	if r.PCIEInfo != nil {
		m["pcie_info"] = r.PCIEInfo
	}
	if r.DevicePath != "" {
		m["device_path"] = r.DevicePath
	}
	for k, v := range map[string]int{"mps_memory_total": r.MPSMemoryTotal, "mps_memory_limit": r.MPSMemoryLimit, "mps_thread_percentage": r.MPSThreadPercentage} {
		if v > 0 {
			m[k] = v
		}
	}
	return m
}

// needsUpdate is Cloudpods' host agent's own test
// (CheckDevIsNeedUpdate, for the fields an MPS device has), so that the two
// agents agree on when a row is current: pcie_info only when the region has
// none, index and device_minor not at all (neither agent writes them).
func needsUpdate(model string, cur, want row) bool {
	if cur.DevType != want.DevType || cur.DevicePath != want.DevicePath || cur.Model != want.Model ||
		cur.NumaNode != want.NumaNode || (want.PCIEInfo != nil && cur.PCIEInfo == nil) ||
		cur.MPSMemoryLimit != want.MPSMemoryLimit || cur.MPSMemoryTotal != want.MPSMemoryTotal ||
		cur.MPSThreadPercentage != want.MPSThreadPercentage {
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
func (w *wantRow) slices(model string, r row) []api.IsolatedDevice {
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

// heldSlices are the virtual devices of a row no longer wanted that guests
// hold: one per guest, pending removal.
func heldSlices(model string, r row) []api.IsolatedDevice {
	var out []api.IsolatedDevice
	guests := r.guests()
	if len(guests) == 0 {
		guests = []string{guestIDUnknown} // the region refused the purge: someone holds it
	}
	for i, g := range guests {
		addr, id := r.Addr, r.ID
		if model == ModelGPU {
			addr, id = api.SliceAddr(r.Addr, i), ""
		}
		out = append(out, api.IsolatedDevice{
			ID: id, HostID: r.HostID, DevType: api.DevTypeNvidiaMPS, Model: r.Model, Addr: addr,
			VendorDeviceID: r.VendorDeviceID, DevicePath: r.DevicePath, NumaNode: r.NumaNode, PCIEInfo: r.PCIEInfo,
			Index: -1, DeviceMinor: -1, MPSMemoryLimit: r.MPSMemoryLimit, MPSMemoryTotal: r.MPSMemoryTotal,
			MPSThreadPercentage: r.MPSThreadPercentage, GuestID: g, PendingRemoval: true,
		})
	}
	return out
}
