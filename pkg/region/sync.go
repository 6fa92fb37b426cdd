package region

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/devsync"
)

// pathDevices is the region's isolated-device collection.
const pathDevices = "/isolated_devices"

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
