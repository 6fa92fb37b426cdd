package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/entries"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/metrics"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/plan"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// Reconcile brings MPS and the backend in line with the configuration
// once, checking every GPU: plan; MPS per GPU (compute mode, control
// daemon, default limits and the limits of running servers, read back);
// the CDI spec; only then the backend; then what left the plan. A GPU
// whose MPS fails keeps its devices in the backend marked unhealthy, so
// nothing is handed out on it and nothing held is lost. A configuration or
// GPU error changes nothing.
func (a *Agent) Reconcile(ctx context.Context) error { return a.reconcile(ctx, true) }

// reconcileChanged is Reconcile after an edit or a health change: only the
// GPUs whose target changed, or that are not known healthy, are prepared
// (gpu.go); the CDI spec and the backend follow the whole plan as always.
func (a *Agent) reconcileChanged(ctx context.Context) error { return a.reconcile(ctx, false) }

// row is a reconcile's stages, in order: each is a station's part, handed
// the round as the stages before it left it. Adding a station is a file
// and a line here (and its status in stations).
func (a *Agent) row() []stage {
	return []stage{
		a.entries.ahead,   // a start's identity files, made while MPS is prepared
		a.mps.prepare,     // MPS per GPU: control daemon, limits set and read back
		a.entries.write,   // the view chosen; identity files, views, CDI entries: startable before anyone is given them
		a.devices.sync,    // the backend, the one edge: the plan offered, its holdings answered
		a.keepFigures,     // the accounting keeps the figures of the devices that remain
		a.entries.rewrite, // again once the sync created devices or keeps one out of the plan
		a.nri.publish,     // the NRI plugin's devices: what each holder holds, as the entries give it
		a.mps.retire,      // GPUs out of the plan, once nothing uses them
	}
}

// stations fill /status, each its part (the agent's own is the loop's, the
// configuration's and the last reconcile's).
func (a *Agent) stations() []func(*status.Status) {
	return []func(*status.Status){a.mps.status, a.entries.status, a.devices.status, a.acct.Status}
}

// stage is one station's part of a reconcile; an error ends the reconcile
// there, failed.
type stage func(ctx context.Context, r *round) error

// round is one reconcile on its way down the row: the plan, and what each
// stage made for the stages after it.
type round struct {
	cfg  *Config
	plan *plan.Plan
	// full: every GPU is checked (else only those whose target changed or
	// that are not known healthy).
	full bool
	// present are the GPUs NVML lists, by UUID; planned the plan's
	// devices by GPU.
	present map[gpu.UUID]gpu.Info
	planned map[gpu.UUID][]vdev.Device
	// identities waits for a start's identity files (entries.ahead).
	identities func()
	// gpus are the planned GPUs' status, in the plan's order, and errs
	// their failures, which fail the reconcile once the row is done;
	// priorities each control daemon's default client priority (mps).
	gpus       []status.GPU
	errs       []error
	priorities map[gpu.UUID]int
	// view is whether containers get the view, chosen once (entries.write)
	// for the devices and the claims, whose entries go to claimSpec;
	// classes are the QoS classes the entries last carried.
	view       viewChoice
	viewChosen bool
	claimSpec  entries.Spec
	classes    map[vdev.Name]vdev.Class
	// listed are the backend's holdings as the last sync left them, and
	// answer this round's (devices.sync); host the host's name, desired
	// how many devices the plan has; remaining the devices and claims
	// listed before and after the sync.
	listed    map[vdev.Name]listed
	answer    backend.Answer
	host      string
	desired   int
	remaining map[string]bool
}

// newRound is a round of plan p, made of cfg against the GPUs present;
// listed are the backend's holdings as the last sync left them.
func newRound(cfg *Config, p *plan.Plan, present []gpu.Info, full bool, listed map[vdev.Name]listed) *round {
	r := &round{cfg: cfg, plan: p, full: full, present: map[gpu.UUID]gpu.Info{}, planned: map[gpu.UUID][]vdev.Device{}, listed: listed}
	for _, g := range present {
		r.present[g.UUID] = g
	}
	for _, gp := range p.GPUs {
		r.planned[gp.GPU.UUID] = gp.Devices
	}
	return r
}

func (a *Agent) reconcile(ctx context.Context, full bool) (err error) {
	start := time.Now()
	defer func() { a.met.observe(time.Since(start), err) }()
	cfg := a.config()
	p, gpus, err := a.plan(ctx, cfg)
	if err != nil {
		return a.fail(withKind(metrics.ErrorConfig, fmt.Errorf("invalid configuration, nothing changed: %w", err)))
	}
	r := newRound(cfg, p, gpus, full, a.devices.listed)
	for _, s := range a.row() {
		if err := s(ctx, r); err != nil {
			return a.fail(err)
		}
	}
	res := r.answer
	a.log.Info("reconciled",
		"simulated", a.opts.Simulated, "host", r.host, "gpus", len(p.GPUs), "virtual_devices", r.desired,
		"created", res.Created, "updated", res.Updated, "deleted", res.Deleted, "held", res.HeldOutOfPlan,
		"duration", time.Since(start).Round(time.Millisecond).String())
	if len(r.errs) > 0 {
		return a.fail(errors.Join(r.errs...))
	}
	a.succeed()
	return nil
}

// plan builds the plan of cfg against the GPUs present.
func (a *Agent) plan(ctx context.Context, cfg *Config) (*plan.Plan, []gpu.Info, error) {
	return buildPlan(ctx, a.opts.Backend, cfg, a.opts.SysfsRoot, a.opts.DevRoot)
}

func (a *Agent) fail(err error) error {
	a.mu.Lock()
	a.status.Ready = false
	a.status.LastError = err.Error()
	a.status.LastReconcile = time.Now()
	a.mu.Unlock()
	a.sendNotify("STATUS=" + a.statusLine())
	return err
}

// succeed records a full reconcile and, the first time, tells systemd the
// service is ready: every device registered, every cap enforced.
func (a *Agent) succeed() {
	a.mu.Lock()
	a.status.Ready = true
	a.status.LastError = ""
	a.status.LastReconcile = time.Now()
	a.mu.Unlock()
	a.sendNotify("STATUS=" + a.statusLine())
	if !a.readySent {
		a.readySent = true
		a.sendNotify("READY=1")
		// The start's garbage (the first specs encoded, the inventory's
		// answers) goes back to the OS at once instead of being scavenged
		// over the following minutes: an idle daemon's resident memory is
		// its live heap, not the start's peak (memory.go).
		a.trim.trim(time.Now())
	}
}

// statusLine is the one line systemctl status shows (status.Status.Line).
func (a *Agent) statusLine() string { return a.Status().Line(time.Now()) }

// pipeLog gives a GPU its own pipe and log directory under the roots, or,
// in the single layout, the roots themselves (layout.go); its control
// daemon's private directory is the same place under the pipe root's
// sibling (mps.PrivilegedRoot).
func (c *Config) pipeLog(uuid gpu.UUID) mps.Env {
	private := mps.PrivilegedRoot(c.Host.CudaMPSPipeDirectory)
	if c.single() {
		return mps.Env{PipeDir: c.Host.CudaMPSPipeDirectory, LogDir: c.Host.CudaMPSLogDirectory, Single: true, MultiUser: c.Host.MultiUserServer, PrivilegedDir: private}
	}
	return mps.Env{
		PipeDir:        filepath.Join(c.Host.CudaMPSPipeDirectory, uuid.String()),
		LogDir:         filepath.Join(c.Host.CudaMPSLogDirectory, uuid.String()),
		VisibleDevices: uuid.String(),
		MultiUser:      c.Host.MultiUserServer,
		PrivilegedDir:  filepath.Join(private, uuid.String()),
	}
}
