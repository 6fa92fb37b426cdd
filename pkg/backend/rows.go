package backend

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/devsync"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// The backends of rows speak Cloudpods' rows (pkg/api). This file is the
// one place a virtual device becomes a row and a row a holding: nothing
// else on the agent's side of the edge reads a row's fields.

// RowStore is a backend that keeps a host's devices as rows: mps-inventory
// (pkg/inventory/client) or a Cloudpods region (pkg/region), each over its
// own records.
type RowStore interface {
	// EnsureHost finds the host called name, or registers it.
	EnsureHost(ctx context.Context, name string) (api.Host, error)
	// SyncDevices makes the host's rows what desired describes.
	SyncDevices(ctx context.Context, hostID string, desired []api.IsolatedDevice) (devsync.Result, error)
}

// Rows is a RowStore on the edge: the host registered once per process
// (the store finds it by name, so a restarted daemon gets the same
// record), then each offer's devices synced as rows.
type Rows struct {
	store RowStore
	log   *slog.Logger
	// ahead is the registration NewRows began, until a Sync takes it.
	ahead chan registration
	// mu guards host, which a Sync sets once.
	mu   sync.Mutex
	host registration
}

// registration is the store's answer to registering the host called name.
type registration struct {
	name string
	host api.Host
	err  error
}

// NewRows is s on the edge. A start registers the host while MPS is
// prepared (it hands nothing out: no device is created before the CDI
// spec names it): with a host name, the registration begins now, in the
// background until ctx ends, and the first Sync takes its answer.
func NewRows(ctx context.Context, s RowStore, host string, log *slog.Logger) *Rows {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Rows{store: s, log: log}
	if host != "" {
		ahead := make(chan registration, 1)
		r.ahead = ahead
		go func() {
			h, err := s.EnsureHost(ctx, host)
			ahead <- registration{name: host, host: h, err: err}
		}()
	}
	return r
}

// Sync registers the host (once) and syncs o's devices as its rows: the
// store turns them into its records. Only the devices are the store's: it
// splits GPUs into fixed slices, and prepares no claims.
func (r *Rows) Sync(ctx context.Context, o Offer) (Answer, error) {
	id, err := r.register(ctx, o.Host)
	if err != nil {
		return Answer{}, err
	}
	rows := make([]api.IsolatedDevice, 0, len(o.GPUs))
	for _, g := range o.GPUs {
		for _, d := range g.Devices {
			row := rowOf(d.Device, g.Healthy)
			row.HostID = id
			rows = append(rows, row)
		}
	}
	res, err := r.store.SyncDevices(ctx, id, rows)
	a := Answer{HostID: id, Created: res.Created, Updated: res.Updated, Deleted: res.Deleted, HeldOutOfPlan: len(res.Held)}
	if err != nil {
		return a, fmt.Errorf("syncing devices with the inventory: %w", err)
	}
	a.Devices = make([]Holding, 0, len(res.Devices))
	for _, row := range res.Devices {
		if h, ok := holdingOf(row); ok {
			a.Devices = append(a.Devices, h)
		}
	}
	return a, nil
}

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
		CDIName:             cdi.DeviceName(d.Name()),
	}
}

// holdingOf reads a row the sync answered with: the virtual device its
// addr and device_path (GPU UUID) name. A row shaped otherwise (not a
// slice of a GPU) names no device of ours: ok is false.
func holdingOf(r api.IsolatedDevice) (Holding, bool) {
	_, i, ok := api.ParseSliceAddr(r.Addr)
	if !ok || r.DevicePath == "" {
		return Holding{}, false
	}
	return Holding{
		Name: vdev.NameOf(gpu.UUID(r.DevicePath), i), ID: r.ID, Holder: r.GuestID,
		Healthy: !r.Unhealthy, PendingRemoval: r.PendingRemoval, CDIName: r.CDIName,
		MemoryLimit: units.MiB(r.MPSMemoryLimit), ThreadPercentage: r.MPSThreadPercentage,
	}, true
}

// register is the host's id in the store: registered once per process,
// the answer NewRows began taken when it is for the same name.
func (r *Rows) register(ctx context.Context, name string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.host.host.ID != "" {
		return r.host.host.ID, nil
	}
	var reg registration
	if ahead := r.ahead; ahead != nil {
		r.ahead = nil
		select {
		case reg = <-ahead:
		case <-ctx.Done():
			return "", fmt.Errorf("registering host %q with the inventory: %w", name, ctx.Err())
		}
	}
	if reg.name != name {
		h, err := r.store.EnsureHost(ctx, name)
		reg = registration{name: name, host: h, err: err}
	}
	if reg.err != nil {
		return "", fmt.Errorf("registering host %q with the inventory: %w", name, reg.err)
	}
	r.host = reg
	r.log.Info("host registered", "host", name, "host_id", reg.host.ID)
	return reg.host.ID, nil
}
