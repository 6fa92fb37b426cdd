// Package dra is the host agent's face to Kubernetes: a Dynamic Resource
// Allocation kubelet plugin for the virtual devices, on the agent's one
// edge to its backend (backend.Offer in, backend.Answer out). Each
// reconcile hands it the same offer the Cloudpods backends get (one plan,
// one MPS control, one CDI spec); it publishes the devices as
// ResourceSlices instead, answers the kubelet's NodePrepareResources with
// the devices' CDI names, and streams their health to the kubelet.
//
// What it prepares is kept by pkg/ledger, plain Go: the claims, their own
// devices on GPUs shared by claims, the checkpoint a restart reads back
// and its rebuild. This package only translates: ResourceClaims into the
// ledger's allocations, its devices into ResourceSlices, its state into
// the kubelet's answers and health reports.
//
// A GPU whose MPS is not serving keeps its devices published with a taint
// (DRADeviceTaints), so the scheduler allocates none of them, and the
// kubelet's health stream (WatchHealthStatus) reports them unhealthy, so a
// pod using one shows it.
package dra

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/ledger"
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

// Driver is the kubelet plugin: the ledger of prepared claims, and how
// its devices reach the API server and the kubelet.
type Driver struct {
	opts   Options
	log    *slog.Logger
	ledger *ledger.Ledger
	// changed has a value when claims were prepared or unprepared since
	// the agent last synced: the agent reconciles (Changed).
	changed chan struct{}

	mu     sync.Mutex
	pub    publishing
	client kubernetes.Interface // reads claims for a rebuild; set by Start
	// shown are the pool's devices as last worked out, what the health
	// stream reports on, published or not.
	shown []ledger.Device
	// checked is when the agent last handed devices over: when their
	// health was last known.
	checked time.Time
	// healthChanged is closed (and replaced) when the health of a
	// published device changes, waking the kubelet's health streams.
	healthChanged chan struct{}
}

// New opens the ledger (the checkpoint); it starts nothing.
func New(opts Options) (*Driver, error) {
	if opts.NodeName == "" {
		return nil, errors.New("dra: node name is required")
	}
	if opts.DriverName == "" {
		opts.DriverName = DefaultDriverName
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	log := opts.Log.With("component", "dra")
	l, err := ledger.Open(ledger.Options{Pool: opts.NodeName, Driver: opts.DriverName, CheckpointPath: opts.CheckpointPath, ClaimKind: opts.ClaimKind, Log: log})
	if err != nil {
		return nil, err
	}
	return &Driver{opts: opts, log: log, ledger: l, changed: make(chan struct{}, 1), healthChanged: make(chan struct{})}, nil
}

// Pool is the name of the node's pool.
func (d *Driver) Pool() string { return d.opts.NodeName }

// Sync is the agent's edge: o's devices become the node's pool (published
// anew when it changed), a GPU shared by claims as its claims device. The
// answer holds the offered devices, each fixed slice with the claim that
// holds it, then the held slices the plan does not have any more (pending
// removal, as they were prepared); and the own devices of the prepared
// claims, which the agent bills. While a rebuild of the checkpoint is
// pending it is tried first, and its failure fails the sync: a node never
// reports ready with claims it has lost.
func (d *Driver) Sync(ctx context.Context, o backend.Offer) (backend.Answer, error) {
	answer := d.ledger.Sync(o)
	d.mu.Lock()
	d.checked = time.Now()
	d.mu.Unlock()
	if err := d.rebuild(ctx); err != nil {
		return answer, err
	}
	published := d.publish(false)
	answer.ClaimDevices = d.ledger.ClaimDevices()
	return answer, d.awaitPublished(ctx, published)
}

// Changed has a value whenever claims were prepared or unprepared since it
// was last read: what the agent's last answer said of them is stale (the
// agent reconciles, and bills the new claims' processes from then on).
func (d *Driver) Changed() <-chan struct{} { return d.changed }

func (d *Driver) noteChanged() {
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// resources is the node's pool: one slice per GPU (at most 48 slices and
// its claims device: within the 64 devices a slice with taints may have).
func (d *Driver) resources(devs []ledger.Device) resourceslice.DriverResources {
	var sl []resourceslice.Slice
	for i, dev := range devs {
		if i == 0 || dev.GPUUUID != devs[i-1].GPUUUID {
			sl = append(sl, resourceslice.Slice{})
		}
		last := &sl[len(sl)-1]
		last.Devices = append(last.Devices, sliceDevice(dev, d.opts.DriverName, d.opts.DriverVersion, !dev.Healthy))
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

// Claims are the prepared claims, by UID (for tests).
func (d *Driver) Claims() map[string]ledger.Claim { return d.ledger.Claims() }
