// Package dra is the host agent's face to Kubernetes: a Dynamic Resource
// Allocation kubelet plugin for the virtual devices. It is the agent's
// Inventory (agent.Inventory): each reconcile hands it the same rows the
// Cloudpods inventory gets (one plan, one MPS control, one CDI spec), and it
// publishes them as ResourceSlices instead, answers the kubelet's
// NodePrepareResources with the devices' CDI names and keeps the prepared
// claims in a checkpoint file, so a restart loses none.
//
// A prepared device is held: the rows it hands back to the agent carry the
// claim as the device's guest, so the agent keeps the device's CDI entry
// when a resize or a removed GPU takes it out of the plan (as it does for a
// Cloudpods guest), and the ResourceSlice keeps publishing it exactly as it
// was prepared until the claim is unprepared.
package dra

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/devsync"
)

// DefaultDriverName is the driver's name in DeviceClasses, claims and
// ResourceSlices, and the domain of its attributes.
const DefaultDriverName = "mps.yunion.io"

// Options configure a Driver.
type Options struct {
	// DriverName defaults to DefaultDriverName.
	DriverName string
	// NodeName is this node; it also names the driver's pool.
	NodeName string
	// CheckpointPath is the file of prepared claims.
	CheckpointPath string
	// DriverVersion is the NVIDIA driver's version, published as an
	// attribute; empty leaves the attribute out.
	DriverVersion string
	Log           *slog.Logger
}

// Publisher publishes the pool: kubeletplugin.Helper.
type Publisher interface {
	PublishResources(ctx context.Context, resources resourceslice.DriverResources) error
}

// Driver is the plugin's state: the last reconcile's devices and the
// prepared claims.
type Driver struct {
	opts Options
	log  *slog.Logger

	mu        sync.Mutex
	pub       Publisher
	synced    bool // a reconcile has handed devices over since the start
	current   []Device
	claims    map[types.UID]Claim
	published []Device // what was last handed to pub
}

// New reads the checkpoint; it starts nothing.
func New(opts Options) (*Driver, error) {
	if opts.NodeName == "" {
		return nil, errors.New("dra: node name is required")
	}
	if opts.CheckpointPath == "" {
		return nil, errors.New("dra: checkpoint path is required")
	}
	if opts.DriverName == "" {
		opts.DriverName = DefaultDriverName
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	claims, err := loadCheckpoint(opts.CheckpointPath)
	if err != nil {
		return nil, err
	}
	d := &Driver{opts: opts, log: opts.Log.With("component", "dra"), claims: claims}
	if len(claims) > 0 {
		d.log.Info("prepared claims read from the checkpoint", "claims", len(claims), "path", opts.CheckpointPath)
	}
	return d, nil
}

// Pool is the name of the node's pool.
func (d *Driver) Pool() string { return d.opts.NodeName }

// setPublisher starts publishing: at once when a reconcile has already
// handed devices over, else at the first one (until then the slices left
// by a previous run stay as they were).
func (d *Driver) setPublisher(ctx context.Context, p Publisher) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pub = p
	return d.publishLocked(ctx, true)
}

// EnsureHost is agent.Inventory's: the node is the host.
func (d *Driver) EnsureHost(_ context.Context, name string) (api.Host, error) {
	return api.Host{ID: d.opts.NodeName, Name: name}, nil
}

// SyncDevices is agent.Inventory's: desired are the reconcile's devices.
// The answer holds them, with the claim that holds each as its guest, and
// the held devices the plan does not have any more (pending removal, as
// they were prepared, named in Held); the pool is published anew when it
// changed.
func (d *Driver) SyncDevices(ctx context.Context, hostID string, desired []api.IsolatedDevice) (devsync.Result, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cur := make([]Device, 0, len(desired))
	for _, r := range desired {
		if dev, ok := deviceOf(r); ok {
			cur = append(cur, dev)
		}
	}
	d.current, d.synced = cur, true
	holder := d.holders()
	var res devsync.Result
	inPlan := map[string]bool{}
	for _, dev := range cur {
		inPlan[dev.Name] = true
		res.Devices = append(res.Devices, dev.row(hostID, string(holder[dev.Name].UID), false))
	}
	for _, name := range slices.Sorted(maps.Keys(holder)) {
		if h := holder[name]; !inPlan[name] {
			// Held is what the inventory's sync reports too: kept, out of
			// the plan, pending removal.
			res.Held = append(res.Held, name)
			res.Devices = append(res.Devices, h.Device.row(hostID, string(h.UID), true))
		}
	}
	res.Unchanged = len(res.Devices)
	if err := d.publishLocked(ctx, false); err != nil {
		return res, err
	}
	return res, nil
}

// holding is a prepared device and the claim that holds it.
type holding struct {
	Prepared
	UID types.UID
}

// holders maps each prepared device's name to its claim.
func (d *Driver) holders() map[string]holding {
	out := map[string]holding{}
	for uid, c := range d.claims {
		for _, p := range c.Devices {
			out[p.Device.Name] = holding{Prepared: p, UID: uid}
		}
	}
	return out
}

// Published is what the pool holds: every prepared device as it was
// prepared, then every healthy device of the last reconcile that no claim
// holds, ordered by GPU and index. An unhealthy or removed GPU's free
// devices are withdrawn; a held one stays until it is unprepared.
func Published(current []Device, claims map[types.UID]Claim) []Device {
	held := map[string]Device{}
	for _, c := range claims {
		for _, p := range c.Devices {
			held[p.Device.Name] = p.Device
		}
	}
	out := slices.Collect(maps.Values(held))
	for _, dev := range current {
		if _, ok := held[dev.Name]; !ok && dev.Healthy {
			out = append(out, dev)
		}
	}
	slices.SortFunc(out, func(a, b Device) int {
		return cmp.Or(cmp.Compare(a.GPUUUID, b.GPUUUID), cmp.Compare(a.Index, b.Index))
	})
	return out
}

// publishLocked hands the pool to the publisher when it changed (or when
// force, the first time); not before a reconcile has said what there is.
func (d *Driver) publishLocked(ctx context.Context, force bool) error {
	if d.pub == nil || !d.synced {
		return nil
	}
	devs := Published(d.current, d.claims)
	if !force && d.published != nil && slices.Equal(devs, d.published) {
		return nil
	}
	if err := d.pub.PublishResources(ctx, d.resources(devs)); err != nil {
		return fmt.Errorf("publishing ResourceSlices: %w", err)
	}
	d.published = devs
	d.log.Info("ResourceSlices published", "pool", d.Pool(), "devices", len(devs))
	return nil
}

// resources is the node's pool: one slice with devs.
func (d *Driver) resources(devs []Device) resourceslice.DriverResources {
	out := make([]resourceapi.Device, len(devs))
	for i, dev := range devs {
		out[i] = dev.sliceDevice(d.opts.DriverVersion)
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.Pool(): {Slices: []resourceslice.Slice{{Devices: out}}},
	}}
}

// PrepareResourceClaims is the kubelet's NodePrepareResources: each claim's
// devices of this driver and pool get the CDI names of the host's spec. A
// claim prepared already gets the same answer again (the kubelet repeats
// itself after its restarts); a device held by another claim, or one the
// pool does not publish, fails that claim.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	var added []types.UID
	for _, c := range claims {
		if prev, ok := d.claims[c.UID]; ok {
			out[c.UID] = resultOf(prev)
			continue
		}
		prepared, err := d.prepare(c)
		if err != nil {
			d.log.Warn("claim not prepared", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "err", err)
			out[c.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		d.claims[c.UID] = prepared
		added = append(added, c.UID)
		out[c.UID] = resultOf(prepared)
		d.log.Info("claim prepared", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "devices", len(prepared.Devices))
	}
	if len(added) > 0 {
		if err := saveCheckpoint(d.opts.CheckpointPath, d.claims); err != nil {
			// Not recorded, so not handed out: the kubelet asks again.
			for _, uid := range added {
				delete(d.claims, uid)
			}
			return nil, err
		}
	}
	return out, nil
}

// prepare checks claim c's devices against the pool.
func (d *Driver) prepare(c *resourceapi.ResourceClaim) (Claim, error) {
	if c.Status.Allocation == nil {
		return Claim{}, fmt.Errorf("claim %s/%s is not allocated", c.Namespace, c.Name)
	}
	offered := map[string]Device{}
	for _, dev := range Published(d.current, d.claims) {
		offered[dev.Name] = dev
	}
	holder := d.holders()
	out := Claim{UID: c.UID, Namespace: c.Namespace, Name: c.Name}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != d.opts.DriverName {
			continue
		}
		if r.Pool != d.Pool() {
			return Claim{}, fmt.Errorf("claim %s/%s: device %s is in pool %q, this node's is %q", c.Namespace, c.Name, r.Device, r.Pool, d.Pool())
		}
		if h, ok := holder[r.Device]; ok {
			return Claim{}, fmt.Errorf("claim %s/%s: device %s is held by claim %s", c.Namespace, c.Name, r.Device, h.UID)
		}
		dev, ok := offered[r.Device]
		if !ok {
			return Claim{}, fmt.Errorf("claim %s/%s: device %s is not offered on this node (removed, resized or unhealthy since it was allocated)", c.Namespace, c.Name, r.Device)
		}
		out.Devices = append(out.Devices, Prepared{Request: r.Request, Pool: r.Pool, Device: dev})
	}
	return out, nil
}

func resultOf(c Claim) kubeletplugin.PrepareResult {
	var res kubeletplugin.PrepareResult
	for _, p := range c.Devices {
		res.Devices = append(res.Devices, kubeletplugin.Device{
			Requests: []string{p.Request}, PoolName: p.Pool, DeviceName: p.Device.Name,
			CDIDeviceIDs: []string{p.Device.CDIName},
		})
	}
	return res
}

// UnprepareResourceClaims is the kubelet's NodeUnprepareResources: the
// claims' devices are free again (published as the plan has them now, or
// withdrawn when the plan has them no more). A claim not prepared is no
// error.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[types.UID]error, len(claims))
	var gone []Claim
	for _, c := range claims {
		out[c.UID] = nil
		if prev, ok := d.claims[c.UID]; ok {
			gone = append(gone, prev)
			delete(d.claims, c.UID)
		}
	}
	if len(gone) == 0 {
		return out, nil
	}
	if err := saveCheckpoint(d.opts.CheckpointPath, d.claims); err != nil {
		for _, c := range gone {
			d.claims[c.UID] = c
		}
		return nil, err
	}
	for _, c := range gone {
		d.log.Info("claim unprepared", "claim", c.Namespace+"/"+c.Name, "uid", c.UID)
	}
	if err := d.publishLocked(ctx, false); err != nil {
		d.log.Error("ResourceSlices not published after an unprepare; the next reconcile retries", "err", err)
	}
	return out, nil
}

// HandleError logs the library's background errors (publishing slices,
// the gRPC servers); they are retried by the library or the next
// reconcile.
func (d *Driver) HandleError(_ context.Context, err error, msg string) {
	d.log.Error(msg, "err", err, "recoverable", errors.Is(err, kubeletplugin.ErrRecoverable))
}

// WatchHealthStatus: health is told by withdrawing a GPU's free devices
// from the pool (see Published), not through the kubelet's health stream.
func (d *Driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// Claims are the prepared claims, by UID (for status and tests).
func (d *Driver) Claims() map[types.UID]Claim {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.claims)
}
