package client

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/devsync"
)

// syncPageSize is the page SyncDevices lists the host's rows with
// (Client.pageSize; tests lower it).
const syncPageSize = 1000

// syncPatch is the change a host's sync makes to a row: the fields it owns,
// every field of the device but those named here.
// guest_id is not among them: a sync never attaches or detaches a guest, so
// it cannot undo an attach that happened since it listed the rows.
// unhealthy and pending_removal are: the host reports its GPUs' health, and
// a desired row is never pending removal (a device that comes back, after a
// resize down and up again, is offered again). An empty name is no opinion
// (DevicePatch), so the name the inventory gave the row (dev_<host>_<n>, as
// Cloudpods names devices) is kept.
func syncPatch(d api.IsolatedDevice) api.DevicePatch {
	p := api.PatchOf(d)
	// The key, and what the region side of Cloudpods sets or the daemon
	// does not know, are left as they are.
	p.DevType, p.Addr, p.VendorDeviceID, p.MdevID, p.GuestID = nil, nil, nil, nil, nil
	p.SharingMode, p.HotPluggable, p.VirtualNum, p.MemorySize = nil, nil, nil, nil
	return p
}

// SyncDevices makes the host's NVIDIA_MPS rows match desired (devsync.Sync):
// a row a guest holds is kept, marked pending_removal and reported in
// Held, not an error. Rows of other dev_types are never touched.
//
// A sync whose desired rows are those of the client's last sync of the
// host asks first whether any of the host's rows changed since that
// sync listed them (syncmemo.go): while none did, the inventory answers
// so from the host's version alone, and the last sync's result is
// answered again, with every row unchanged. Any change, by anyone, makes
// it a full sync.
func (c *Client) SyncDevices(ctx context.Context, hostID string, desired []api.IsolatedDevice) (devsync.Result, error) {
	want, err := devsync.Desired(hostID, desired)
	if err != nil {
		return devsync.Result{}, err
	}
	digest, err := digestOf(want)
	if err != nil {
		return devsync.Result{}, err
	}
	p := &hostRows{c: c, hostID: hostID}
	last, remembered := c.memos.get(hostID)
	if remembered && last.digest == digest {
		p.ifVersion = last.version
	}
	res, err := devsync.Sync(ctx, p, want)
	switch {
	case errors.Is(err, errUnchanged):
		c.log.Debug("isolated devices unchanged since the last sync", "host_id", hostID, "devices_version", last.version)
		return last.unchanged(), nil
	case err != nil:
		c.memos.forget(hostID)
		return res, err
	}
	c.memos.put(hostID, syncMemo{digest: digest, version: p.version, result: res})
	return res, nil
}

// hostRows are a host's NVIDIA_MPS rows in mps-inventory, a devsync.Port.
// Its first List asks conditionally when ifVersion is set (the version of
// the host's rows its last sync listed), and answers errUnchanged when
// they are still at it; version is the one the first List found.
type hostRows struct {
	c                  *Client
	hostID             string
	ifVersion, version string
	listed             bool
}

func (p *hostRows) Key(d api.IsolatedDevice) (devsync.Key, string) { return devsync.KeyOf(d), d.ID }

// Create creates d; a 409 is a concurrent sync that created it since the
// list (a row of another dev_type with the same key is not found then, and
// the conflict is returned).
func (p *hostRows) Create(ctx context.Context, d api.IsolatedDevice) ([]api.IsolatedDevice, error) {
	created, err := p.c.CreateIsolatedDevice(ctx, d)
	switch {
	case IsConflict(err):
		return nil, fmt.Errorf("creating isolated device %s: %w (%w)", d.Addr, err, devsync.ErrExists)
	case err != nil:
		return nil, fmt.Errorf("creating isolated device %s: %w", d.Addr, err)
	}
	p.c.log.Debug("created isolated device", "addr", d.Addr, "id", created.ID)
	return []api.IsolatedDevice{created}, nil
}

// CreateAll creates ds in one request, all or none
// (Client.CreateIsolatedDevices; one by one from an inventory without the
// bulk create, answering those created before an error); a 409 is
// devsync.ErrExists, as for Create.
func (p *hostRows) CreateAll(ctx context.Context, ds []api.IsolatedDevice) ([][]api.IsolatedDevice, error) {
	created, err := p.c.CreateIsolatedDevices(ctx, ds)
	out := make([][]api.IsolatedDevice, len(created))
	for i, d := range created {
		out[i] = []api.IsolatedDevice{d}
	}
	switch {
	case IsConflict(err):
		return out, fmt.Errorf("creating %d isolated devices: %w (%w)", len(ds), err, devsync.ErrExists)
	case err != nil:
		return out, fmt.Errorf("creating %d isolated devices: %w", len(ds), err)
	}
	p.c.log.Debug("created isolated devices", "count", len(created))
	return out, nil
}

var _ devsync.BatchCreator[api.IsolatedDevice] = &hostRows{}

// Update sends the sync's patch when applying it would change the row.
func (p *hostRows) Update(ctx context.Context, cur, d api.IsolatedDevice) ([]api.IsolatedDevice, bool, error) {
	patch, next := syncPatch(d), cur
	if patch.Apply(&next); reflect.DeepEqual(next, cur) {
		return []api.IsolatedDevice{cur}, false, nil
	}
	var updated api.IsolatedDeviceBody
	if err := p.c.putPatch(ctx, cur.ID, patch, &updated); err != nil {
		return nil, false, fmt.Errorf("updating isolated device %s (%s): %w", d.Addr, cur.ID, err)
	}
	p.c.log.Debug("updated isolated device", "addr", d.Addr, "id", cur.ID)
	return []api.IsolatedDevice{updated.IsolatedDevice}, true, nil
}

// Remove deletes d; one a guest holds the inventory keeps, and it is marked
// pending_removal.
func (p *hostRows) Remove(ctx context.Context, d api.IsolatedDevice) ([]api.IsolatedDevice, error) {
	err := p.c.DeleteIsolatedDevice(ctx, d.ID)
	switch {
	case err == nil:
		p.c.log.Debug("deleted isolated device", "addr", d.Addr, "id", d.ID)
		return nil, nil
	case IsNotFound(err):
		return nil, devsync.ErrGone
	case !IsDeviceInUse(err):
		return nil, fmt.Errorf("deleting isolated device %s (%s): %w", d.Addr, d.ID, err)
	}
	// Marked once (not again after an earlier sync), and only that field:
	// a detach meanwhile is not undone, and the row, free by then, is still
	// not handed out; the next sync deletes it. A row deleted meanwhile is
	// as wanted.
	if yes := true; !d.PendingRemoval {
		if err := p.c.putPatch(ctx, d.ID, api.DevicePatch{PendingRemoval: &yes}, nil); err != nil && !IsNotFound(err) {
			return nil, fmt.Errorf("marking isolated device %s (%s) pending removal: %w", d.Addr, d.ID, err)
		}
		p.c.log.Info("kept isolated device a guest holds, pending removal", "addr", d.Addr, "id", d.ID, "guest_id", d.GuestID)
	}
	return []api.IsolatedDevice{d}, devsync.ErrHeld
}

// List lists every NVIDIA_MPS row of the host; the first time, it asks
// conditionally (see hostRows).
func (p *hostRows) List(ctx context.Context) ([]api.IsolatedDevice, error) {
	o := ListOptions{HostID: p.hostID, DevType: api.DevTypeNvidiaMPS, Limit: p.c.pageSize}
	if !p.listed {
		o.DevicesVersion = p.ifVersion
	}
	w, err := p.c.listAll(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("listing isolated devices of host %s: %w", p.hostID, err)
	}
	if w.unchanged {
		return nil, errUnchanged
	}
	if !p.listed {
		p.listed, p.version = true, w.version
	}
	return w.devices, nil
}

// putPatch sends patch as the body of PUT /isolated_devices/<id>.
func (c *Client) putPatch(ctx context.Context, id string, patch api.DevicePatch, out any) error {
	body := struct {
		Device api.DevicePatch `json:"isolated_device"`
	}{patch}
	return c.do(ctx, "PUT", devicePath(id), nil, body, out)
}
