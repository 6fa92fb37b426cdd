// Package dra is the host agent's face to Kubernetes: a Dynamic Resource
// Allocation kubelet plugin for the virtual devices. It is the agent's
// Inventory (agent.Inventory): each reconcile hands it the same rows the
// Cloudpods inventory gets (one plan, one MPS control, one CDI spec), and it
// publishes them as ResourceSlices instead, answers the kubelet's
// NodePrepareResources with the devices' CDI names and keeps the prepared
// claims in a checkpoint file, so a restart loses none.
//
// A GPU of fixed slices is published as its slices. A GPU shared by claims
// of any size (the device YAML's sharing: claims) is published as one
// sized device that claims consume (DRA consumable capacity); each claim
// prepared on it gets a device of its own (pkg/claim), with its own entry
// in a CDI spec of claims, made at prepare time and removed at unprepare,
// and the accounting bills its processes to it (agent.ClaimSizer).
//
// A prepared fixed slice is held: the rows it hands back to the agent
// carry the claim as the device's guest, so the agent keeps the device's
// CDI entry when a resize or a removed GPU takes it out of the plan (as it
// does for a Cloudpods guest), and the ResourceSlice keeps publishing it
// exactly as it was prepared until the claim is unprepared.
//
// A GPU whose MPS is not serving keeps its devices published with a taint
// (DRADeviceTaints), so the scheduler allocates none of them, and the
// kubelet's health stream (WatchHealthStatus) reports them unhealthy, so a
// pod using one shows it.
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
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/devsync"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/vdev"
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
	// ClaimKind is the CDI kind of the claims' spec; claim.DefaultKind
	// when empty.
	ClaimKind string
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

	mu      sync.Mutex
	pub     publishing
	client  kubernetes.Interface // reads claims for a rebuild; set by Start
	synced  bool                 // a reconcile has handed devices over since the start
	current []Device             // fixed slices and sized devices, as the last reconcile had them
	claims  map[types.UID]Claim
	// shown are the pool's devices as last worked out (Published), what
	// the health stream reports on, published or not.
	shown []Device
	// gpus are the planned GPUs as the agent last described them, and spec
	// where claims' CDI entries go (nil until it has).
	gpus  map[gpu.UUID]claim.GPU
	spec  *claim.Spec
	specW cdi.Writer
	// rebuild is why the checkpoint is being rebuilt from the API server
	// (it was corrupt); nothing is published or prepared until it is.
	rebuild error
	// checked is when the agent last handed devices over: when their
	// health was last known.
	checked time.Time
	// healthChanged is closed (and replaced) when the health of a
	// published device changes, waking the kubelet's health streams.
	healthChanged chan struct{}
}

// New reads the checkpoint; it starts nothing. A corrupt checkpoint is
// reported, moved aside (<path>.corrupt-<time>) and rebuilt from the API
// server's claims before the first publication (rebuild.go).
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
	if opts.ClaimKind == "" {
		opts.ClaimKind = claim.DefaultKind
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	log := opts.Log.With("component", "dra")
	d := &Driver{opts: opts, log: log, healthChanged: make(chan struct{})}
	pending := pendingRebuild(opts.CheckpointPath)
	claims, err := loadCheckpoint(opts.CheckpointPath)
	switch {
	case errors.Is(err, ErrCorrupt):
		// The marker first: a restart before the rebuild is done rebuilds
		// too (the file is not where it was any more).
		if merr := markRebuild(opts.CheckpointPath, err, time.Now()); merr != nil {
			return nil, fmt.Errorf("%w; %w", err, merr)
		}
		aside, merr := moveAside(opts.CheckpointPath, time.Now())
		if merr != nil {
			return nil, fmt.Errorf("%w; %w", err, merr)
		}
		log.Error("the DRA checkpoint is corrupt: moved aside; the prepared claims are rebuilt from the API server before anything is published or prepared",
			"err", err, "moved_to", aside)
		d.rebuild, claims = err, map[types.UID]Claim{}
	case err != nil:
		return nil, err
	case pending != nil:
		log.Error("the DRA checkpoint's rebuild is not done yet: the prepared claims are rebuilt from the API server before anything is published or prepared",
			"why", pending, "marker", rebuildMarker(opts.CheckpointPath))
		d.rebuild, claims = pending, map[types.UID]Claim{}
	}
	d.claims = claims
	if len(claims) > 0 {
		log.Info("prepared claims read from the checkpoint", "claims", len(claims), "path", opts.CheckpointPath)
	}
	return d, nil
}

// Pool is the name of the node's pool.
func (d *Driver) Pool() string { return d.opts.NodeName }

// EnsureHost is agent.Inventory's: the node is the host.
func (d *Driver) EnsureHost(_ context.Context, name string) (api.Host, error) {
	return api.Host{ID: d.opts.NodeName, Name: name}, nil
}

// SetGPUs is agent.ClaimSizer's: before each sync, the planned GPUs and
// where claims' CDI entries go. The claims' spec is written again when
// what it is made from changed (a start: from the checkpoint).
func (d *Driver) SetGPUs(spec claim.Spec, gpus []claim.GPU) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.spec = &spec
	d.gpus = make(map[gpu.UUID]claim.GPU, len(gpus))
	for _, g := range gpus {
		d.gpus[g.Device.GPU.UUID] = g
	}
	if d.rebuild != nil {
		return // the spec is written once the claims are rebuilt
	}
	if err := d.syncSpecLocked(); err != nil {
		d.log.Error("the claims' CDI spec not written; the previous one stays", "err", err)
	}
}

// ClaimDevices is agent.ClaimSizer's: the devices of the prepared claims on
// sized devices, which the accounting bills as virtual devices.
func (d *Driver) ClaimDevices() []vdev.Device {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []vdev.Device
	for _, c := range d.claims {
		for _, p := range c.Devices {
			if s := p.Share; s != nil {
				out = append(out, vdev.Device{GPU: gpu.Info{UUID: gpu.UUID(p.Device.GPUUUID), Minor: s.Minor, Index: -1},
					Index: s.Index, MemoryLimit: s.MemoryLimit, ThreadPercentage: s.ThreadPercentage})
			}
		}
	}
	slices.SortFunc(out, func(a, b vdev.Device) int { return cmp.Compare(a.Name(), b.Name()) })
	return out
}

// SyncDevices is agent.Inventory's: desired are the reconcile's devices.
// The answer holds them, with the claim that holds each fixed slice as its
// guest, and the held slices the plan does not have any more (pending
// removal, as they were prepared, named in Held); the pool is published
// anew when it changed. A GPU shared by claims (SetGPUs) is published as
// its sized device instead of its row's.
func (d *Driver) SyncDevices(ctx context.Context, hostID string, desired []api.IsolatedDevice) (devsync.Result, error) {
	d.mu.Lock()
	res, err := d.syncLocked(ctx, hostID, desired)
	published := d.publishLocked(false)
	d.mu.Unlock()
	if err != nil {
		return res, err
	}
	return res, d.awaitPublished(ctx, published)
}

// syncLocked is SyncDevices's work on the driver's state.
func (d *Driver) syncLocked(ctx context.Context, hostID string, desired []api.IsolatedDevice) (devsync.Result, error) {
	cur := make([]Device, 0, len(desired))
	holder := d.holders()
	var res devsync.Result
	inPlan := map[string]bool{}
	for _, r := range desired {
		dev, ok := deviceOf(r)
		if !ok {
			continue
		}
		if g, shared := d.gpus[gpu.UUID(dev.GPUUUID)]; shared && g.Claims {
			if dev.Index == g.Device.Index {
				cur = append(cur, dev.sized(g.MaxClaims))
			}
			r.HostID = hostID
			res.Devices = append(res.Devices, r)
			continue
		}
		cur = append(cur, dev)
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
	d.current, d.synced, d.checked = cur, true, time.Now()
	if err := d.rebuildLocked(ctx); err != nil {
		return res, err
	}
	return res, nil
}

// holding is a prepared fixed slice and the claim that holds it.
type holding struct {
	Prepared
	UID types.UID
}

// holders maps each prepared fixed slice's name to its claim. A sized
// device is held by none: its claims share it.
func (d *Driver) holders() map[string]holding {
	out := map[string]holding{}
	for uid, c := range d.claims {
		for _, p := range c.Devices {
			if p.Share == nil {
				out[p.Device.Name] = holding{Prepared: p, UID: uid}
			}
		}
	}
	return out
}

// Published is what the pool holds: every prepared fixed slice as it was
// prepared; every device of the last reconcile that no claim holds; a
// sized device as the plan has it now, or, out of the plan, as its claims
// were prepared on it, while any holds a share. A device of a GPU the
// last reconcile saw unhealthy is marked so (and tainted when published);
// a removed GPU's free devices are withdrawn. Ordered by GPU, fixed slices
// by index, then the sized device.
func Published(current []Device, claims map[types.UID]Claim) []Device {
	healthy := map[string]bool{}
	now := map[string]Device{}
	for _, dev := range current {
		healthy[dev.GPUUUID] = dev.Healthy
		now[dev.Name] = dev
	}
	out := map[string]Device{}
	for _, c := range claims {
		for _, p := range c.Devices {
			dev := p.Device
			if cur, ok := now[dev.Name]; ok && dev.Sized {
				dev = cur
			}
			if h, known := healthy[dev.GPUUUID]; known {
				dev.Healthy = h
			}
			out[dev.Name] = dev
		}
	}
	for _, dev := range current {
		if _, held := out[dev.Name]; !held {
			out[dev.Name] = dev
		}
	}
	devs := slices.Collect(maps.Values(out))
	slices.SortFunc(devs, func(a, b Device) int {
		return cmp.Or(cmp.Compare(a.GPUUUID, b.GPUUUID), compareBool(a.Sized, b.Sized), cmp.Compare(a.Index, b.Index))
	})
	return devs
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// healthOf is the devices' names and health, comparable.
func healthOf(devs []Device) string {
	var b []byte
	for _, dev := range devs {
		b = fmt.Appendf(b, "%s=%v;", dev.Name, dev.Healthy)
	}
	return string(b)
}

// resources is the node's pool: one slice per GPU (at most 48 slices and
// its sized device: within the 64 devices a slice with taints may have).
func (d *Driver) resources(devs []Device) resourceslice.DriverResources {
	var sl []resourceslice.Slice
	for i, dev := range devs {
		if i == 0 || dev.GPUUUID != devs[i-1].GPUUUID {
			sl = append(sl, resourceslice.Slice{})
		}
		last := &sl[len(sl)-1]
		last.Devices = append(last.Devices, dev.sliceDevice(d.opts.DriverName, d.opts.DriverVersion, !dev.Healthy))
	}
	if len(sl) == 0 {
		sl = []resourceslice.Slice{{}}
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.Pool(): {Slices: sl},
	}}
}

// HandleError logs the library's background errors (publishing slices,
// the gRPC servers); they are retried by the library or the next
// reconcile.
func (d *Driver) HandleError(_ context.Context, err error, msg string) {
	d.log.Error(msg, "err", err, "recoverable", errors.Is(err, kubeletplugin.ErrRecoverable))
}

// Claims are the prepared claims, by UID (for status and tests).
func (d *Driver) Claims() map[types.UID]Claim {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.claims)
}
