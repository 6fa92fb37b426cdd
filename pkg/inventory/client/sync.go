package client

import (
	"context"
	"errors"
	"fmt"

	"yunion.io/x/mps-daemon/pkg/api"
)

// SyncResult says what a SyncDevices call changed. Held lists the ids of
// rows that should have gone but a guest holds; they stay, marked
// pending_removal (so they are not handed out again), until released, and
// the first sync after that deletes them.
type SyncResult struct {
	Created, Updated, Deleted, Unchanged int
	Held                                 []string
	// Devices are the host's NVIDIA_MPS rows as the sync left them (the
	// desired ones and the held ones), with their ids: what the host needs
	// afterwards (its CDI spec, what is held) without listing them again.
	Devices []api.IsolatedDevice
}

// syncPageSize is the page SyncDevices lists the host's rows with
// (Client.pageSize; tests lower it).
const syncPageSize = 1000

// deviceKey is what identifies a device of a host across syncs.
type deviceKey struct{ vendorDeviceID, addr string }

func keyOf(d api.IsolatedDevice) deviceKey { return deviceKey{d.VendorDeviceID, d.Addr} }

// owned are the fields a host's sync owns, and the body of its updates.
// guest_id is not among them: a sync never attaches or detaches a guest, so
// it cannot undo an attach that happened since it listed the rows.
// unhealthy and pending_removal are: the host reports its GPUs' health, and
// a desired row is never pending removal (a device that comes back, after a
// resize down and up again, is offered again).
//
// An empty Name is no opinion (the daemon names no device): it is not sent,
// and the name the inventory gave the row (dev_<host>_<n>, as Cloudpods
// names devices) is kept.
type owned struct {
	Name                string        `json:"name,omitempty"`
	Model               string        `json:"model"`
	DevicePath          string        `json:"device_path"`
	RenderPath          string        `json:"render_path"`
	CDIName             string        `json:"cdi_name"`
	NumaNode            int           `json:"numa_node"`
	PCIEInfo            *api.PCIEInfo `json:"pcie_info"` // null clears it
	Index               int           `json:"index"`
	DeviceMinor         int           `json:"device_minor"`
	MPSMemoryLimit      int           `json:"mps_memory_limit"`
	MPSMemoryTotal      int           `json:"mps_memory_total"`
	MPSThreadPercentage int           `json:"mps_thread_percentage"`
	Unhealthy           bool          `json:"unhealthy"`
	PendingRemoval      bool          `json:"pending_removal"`
}

func ownedOf(d api.IsolatedDevice) owned {
	return owned{
		Name: d.Name, Model: d.Model, DevicePath: d.DevicePath, RenderPath: d.RenderPath, CDIName: d.CDIName,
		NumaNode: d.NumaNode, PCIEInfo: d.PCIEInfo, Index: d.Index, DeviceMinor: d.DeviceMinor,
		MPSMemoryLimit: d.MPSMemoryLimit, MPSMemoryTotal: d.MPSMemoryTotal,
		MPSThreadPercentage: d.MPSThreadPercentage,
		Unhealthy:           d.Unhealthy, PendingRemoval: d.PendingRemoval,
	}
}

// equal reports whether a (a row's) is already as b (the desired) wants.
func (a owned) equal(b owned) bool {
	if b.Name == "" {
		a.Name = ""
	}
	pa, pb := a.PCIEInfo, b.PCIEInfo
	a.PCIEInfo, b.PCIEInfo = nil, nil
	return a == b && (pa == pb || (pa != nil && pb != nil && *pa == *pb))
}

// SyncDevices makes the host's NVIDIA_MPS rows match desired, matching rows
// on (vendor_device_id, addr): missing devices are created in the order
// given, rows whose owned fields differ are updated, rows not desired are
// deleted. A row a guest holds is kept, marked pending_removal and reported
// in Held, not an error.
// Rows of other dev_types are never touched. With the same desired set a
// second call changes nothing. On error, the result counts what was done.
func (c *Client) SyncDevices(ctx context.Context, hostID string, desired []api.IsolatedDevice) (SyncResult, error) {
	var res SyncResult
	want, err := prepareDesired(hostID, desired)
	if err != nil {
		return res, err
	}
	existing, err := c.hostMPSDevices(ctx, hostID, "")
	if err != nil {
		return res, err
	}
	byKey := make(map[deviceKey]api.IsolatedDevice, len(existing))
	for _, d := range existing {
		byKey[keyOf(d)] = d
	}

	for _, d := range want {
		cur, ok := byKey[keyOf(d)]
		if !ok {
			created, createErr := c.CreateIsolatedDevice(ctx, d)
			if createErr == nil {
				res.Created++
				res.Devices = append(res.Devices, created)
				c.log.Debug("created isolated device", "addr", d.Addr, "id", created.ID)
				continue
			}
			// 409: a concurrent sync created it since we listed; adopt it.
			// (A row of another dev_type with the same key is not found
			// here, and the conflict is returned.)
			if !IsConflict(createErr) {
				return res, fmt.Errorf("creating isolated device %s: %w", d.Addr, createErr)
			}
			if cur, ok, err = c.findDevice(ctx, hostID, keyOf(d)); err != nil {
				return res, err
			}
			if !ok {
				return res, fmt.Errorf("creating isolated device %s: %w", d.Addr, createErr)
			}
		}
		if ownedOf(cur).equal(ownedOf(d)) {
			res.Unchanged++
			res.Devices = append(res.Devices, cur)
			continue
		}
		var updated api.IsolatedDeviceBody
		err := c.do(ctx, "PUT", devicePath(cur.ID), nil, struct {
			Device owned `json:"isolated_device"`
		}{ownedOf(d)}, &updated)
		if err != nil {
			return res, fmt.Errorf("updating isolated device %s (%s): %w", d.Addr, cur.ID, err)
		}
		res.Updated++
		res.Devices = append(res.Devices, updated.IsolatedDevice)
		c.log.Debug("updated isolated device", "addr", d.Addr, "id", cur.ID)
	}

	wanted := make(map[deviceKey]bool, len(want))
	for _, d := range want {
		wanted[keyOf(d)] = true
	}
	for _, d := range existing {
		if wanted[keyOf(d)] {
			continue
		}
		err := c.DeleteIsolatedDevice(ctx, d.ID)
		switch {
		case err == nil:
			res.Deleted++
			c.log.Debug("deleted isolated device", "addr", d.Addr, "id", d.ID)
		case IsDeviceInUse(err):
			res.Held = append(res.Held, d.ID)
			held := d
			held.PendingRemoval = true
			res.Devices = append(res.Devices, held)
			if d.PendingRemoval {
				continue // marked by an earlier sync
			}
			if err := c.markPendingRemoval(ctx, d.ID); err != nil {
				return res, fmt.Errorf("marking isolated device %s (%s) pending removal: %w", d.Addr, d.ID, err)
			}
			c.log.Info("kept isolated device a guest holds, pending removal", "addr", d.Addr, "id", d.ID, "guest_id", d.GuestID)
		case IsNotFound(err):
			// Removed by someone else since we listed: already as wanted.
		default:
			return res, fmt.Errorf("deleting isolated device %s (%s): %w", d.Addr, d.ID, err)
		}
	}
	return res, nil
}

// prepareDesired fills host_id and dev_type and refuses what the sync
// cannot do right: another host's or another dev_type's devices, rows
// without a key, or two rows with one key.
func prepareDesired(hostID string, desired []api.IsolatedDevice) ([]api.IsolatedDevice, error) {
	if hostID == "" {
		return nil, errors.New("syncing devices: empty host id")
	}
	want := make([]api.IsolatedDevice, len(desired))
	seen := make(map[deviceKey]bool, len(desired))
	for i, d := range desired {
		switch {
		case d.HostID != "" && d.HostID != hostID:
			return nil, fmt.Errorf("syncing devices: %s belongs to host %s, not %s", d.Addr, d.HostID, hostID)
		case d.DevType != "" && d.DevType != api.DevTypeNvidiaMPS:
			return nil, fmt.Errorf("syncing devices: %s has dev_type %s; only %s rows are synced", d.Addr, d.DevType, api.DevTypeNvidiaMPS)
		case d.Addr == "" || d.VendorDeviceID == "":
			return nil, fmt.Errorf("syncing devices: device %d lacks addr or vendor_device_id", i)
		case seen[keyOf(d)]:
			return nil, fmt.Errorf("syncing devices: %s %s is listed twice", d.VendorDeviceID, d.Addr)
		}
		seen[keyOf(d)] = true
		d.HostID, d.DevType = hostID, api.DevTypeNvidiaMPS
		d.ID, d.GuestID, d.PendingRemoval = "", "", false
		want[i] = d
	}
	return want, nil
}

// hostMPSDevices lists every NVIDIA_MPS row of the host (those at addr when
// addr is set), page by page: by marker, so that rows deleted meanwhile
// shift nothing, or, from an inventory without marker paging (an answer
// without marker_field), by offset.
func (c *Client) hostMPSDevices(ctx context.Context, hostID, addr string) ([]api.IsolatedDevice, error) {
	var all []api.IsolatedDevice
	seen := map[string]bool{}
	marker := ""
	for offset := 0; ; {
		o := ListOptions{HostID: hostID, DevType: api.DevTypeNvidiaMPS, Addr: addr, Limit: c.pageSize, Offset: offset}
		if offset == 0 {
			o.PagingMarker = &marker
		}
		page, err := c.ListIsolatedDevices(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("listing isolated devices of host %s: %w", hostID, err)
		}
		for _, d := range page.IsolatedDevices {
			// Rows deleted meanwhile shift offset pages; never count one twice.
			if !seen[d.ID] {
				seen[d.ID] = true
				all = append(all, d)
			}
		}
		switch {
		case page.MarkerField != "":
			if page.NextMarker == "" {
				return all, nil
			}
			marker = page.NextMarker
		case len(page.IsolatedDevices) == 0:
			return all, nil
		default:
			offset += len(page.IsolatedDevices)
			if offset >= page.Total {
				return all, nil
			}
		}
	}
}

func (c *Client) findDevice(ctx context.Context, hostID string, k deviceKey) (api.IsolatedDevice, bool, error) {
	devs, err := c.hostMPSDevices(ctx, hostID, k.addr)
	if err != nil {
		return api.IsolatedDevice{}, false, err
	}
	for _, d := range devs {
		if keyOf(d) == k {
			return d, true, nil
		}
	}
	return api.IsolatedDevice{}, false, nil
}

// markPendingRemoval sets pending_removal on a row the host no longer wants
// but a guest holds. Only that field is sent: a detach that happens
// meanwhile is not undone, and the row, free by then, is still not handed
// out; the next sync deletes it. A row deleted meanwhile is as wanted.
func (c *Client) markPendingRemoval(ctx context.Context, id string) error {
	body := map[string]map[string]bool{"isolated_device": {"pending_removal": true}}
	err := c.do(ctx, "PUT", devicePath(id), nil, body, nil)
	if IsNotFound(err) {
		return nil
	}
	return err
}
