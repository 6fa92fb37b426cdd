package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime/debug"
	"time"

	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/metrics"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/plan"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// Reconcile brings MPS and the inventory in line with the configuration
// once, checking every GPU: plan; MPS per GPU (compute mode, control daemon,
// default limits and the limits of running servers, read back); the CDI
// spec; only then the inventory; then what left the plan. A GPU whose MPS
// fails keeps its devices in the inventory marked unhealthy, so nothing is
// handed out on it and nothing held is lost. A configuration or GPU error
// changes nothing.
func (a *Agent) Reconcile(ctx context.Context) error { return a.reconcile(ctx, true) }

// reconcileChanged is Reconcile after an edit or a health change: only the
// GPUs whose target changed, or that are not known healthy, are prepared
// (gpu.go); the CDI spec and the inventory follow the whole plan as always.
func (a *Agent) reconcileChanged(ctx context.Context) error { return a.reconcile(ctx, false) }

func (a *Agent) reconcile(ctx context.Context, full bool) (err error) {
	start := time.Now()
	defer func() { a.met.observe(time.Since(start), err) }()
	cfg := a.config()
	p, gpus, err := a.plan(ctx, cfg)
	if err != nil {
		return a.fail(withKind(metrics.ErrorConfig, fmt.Errorf("invalid configuration, nothing changed: %w", err)))
	}
	a.layout = layoutOf(cfg, p)
	a.present = map[gpu.UUID]gpu.Info{}
	for _, g := range gpus {
		a.present[g.UUID] = g
	}
	planned := map[gpu.UUID]bool{}
	a.planned = map[gpu.UUID][]vdev.Device{}
	for _, gp := range p.GPUs {
		planned[gp.GPU.UUID] = true
		a.planned[gp.GPU.UUID] = gp.Devices
	}

	// MPS first: it must work even while the inventory is away. A start's
	// identity files are made meanwhile (startIdentities); its host is
	// registered meanwhile by the backend (backend.NewRows).
	identitiesMade := a.startIdentities(cfg, p)
	statuses, gpuErrs := a.prepareGPUs(ctx, cfg, p, full)
	identitiesMade()

	// Whether containers get the view, once for the devices and the claims.
	view := a.chooseView(cfg)
	// The CDI spec before the inventory: a device must be startable by its
	// <GPU UUID>::<i> name before anyone can be given it.
	a.writeCDI(cfg, p, statuses, view)
	res, desired, hostName, err := a.syncInventory(ctx, cfg, p, statuses, view)
	if err != nil {
		a.setGPUs(statuses, 0, false)
		return a.fail(err)
	}
	if res.Created > 0 || res.HeldOutOfPlan > 0 {
		// The spec once more: the devices just created have their ids, and
		// a device held out of the plan keeps its entry even when it was
		// attached (or its DRA claim prepared) after the previous sync, which
		// the first write went by.
		a.writeCDI(cfg, p, statuses, view)
	}
	retiring := a.retire(ctx, cfg, planned)
	a.setGPUs(statuses, desired, true)
	a.mu.Lock()
	a.status.Retiring = nil
	for _, uuid := range retiring {
		a.status.Retiring = append(a.status.Retiring, uuid.String())
	}
	a.mu.Unlock()
	a.log.Info("reconciled",
		"simulated", a.opts.Simulated, "host", hostName, "gpus", len(p.GPUs), "virtual_devices", desired,
		"created", res.Created, "updated", res.Updated, "deleted", res.Deleted, "held", res.HeldOutOfPlan,
		"duration", time.Since(start).Round(time.Millisecond).String())
	if len(gpuErrs) > 0 {
		return a.fail(errors.Join(gpuErrs...))
	}
	a.succeed()
	return nil
}

// syncInventory is the inventory stage: the backend offered the plan's
// GPUs and devices (unhealthy where their GPU is) and where claims' entries
// go (with the view v), and what it then holds kept in a.listed, a.claims
// and the status. It returns the backend's answer, how many devices the
// plan has and the host's name.
func (a *Agent) syncInventory(ctx context.Context, cfg *Config, p *plan.Plan, statuses []status.GPU, v viewChoice) (res backend.Answer, desired int, host string, err error) {
	host, err = HostName(cfg.Host)
	if err != nil {
		return res, 0, host, withKind(metrics.ErrorInventory, err)
	}
	offer := backend.Offer{Host: host, GPUs: a.offerGPUs(cfg, p, statuses), ClaimSpec: a.entriesSpec(cfg, v.View)}
	byName := map[vdev.Name]vdev.Device{}
	for _, gp := range p.GPUs {
		for _, d := range gp.Devices {
			byName[d.Name()] = d
		}
	}
	answer, err := a.opts.Devices.Sync(ctx, offer)
	if answer.HostID != "" && answer.HostID != a.hostID {
		a.hostID = answer.HostID
		a.mu.Lock()
		a.status.HostID, a.status.HostName = answer.HostID, host
		a.mu.Unlock()
	}
	if err != nil {
		return answer, 0, host, withKind(metrics.ErrorInventory, err)
	}
	listed, order := a.byName(answer.Devices, byName)
	a.listed, a.claims = listed, answer.ClaimDevices
	a.mu.Lock()
	prevDevs, prevClaims := a.status.Devices, a.status.Claims
	a.mu.Unlock()
	a.setDevices(order)
	a.setClaims(statuses)
	a.keepFigures(prevDevs, prevClaims)
	return answer, len(byName), host, nil
}

// plan builds the plan of cfg against the GPUs present.
func (a *Agent) plan(ctx context.Context, cfg *Config) (*plan.Plan, []gpu.Info, error) {
	return buildPlan(ctx, a.opts.Backend, cfg, a.opts.SysfsRoot, a.opts.DevRoot)
}

func (a *Agent) setGPUs(gpus []status.GPU, devices int, inventoryOK bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.status.GPUs = gpus
	a.status.VirtualDevices = devices
	a.status.InventoryReachable = inventoryOK
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
		// its live heap, not the start's peak.
		debug.FreeOSMemory()
	}
}

// statusLine is the one line systemctl status shows.
func (a *Agent) statusLine() string {
	st := a.Status()
	unhealthy := 0
	for _, g := range st.GPUs {
		if !g.Healthy {
			unhealthy++
		}
	}
	line := fmt.Sprintf("%d GPUs, %d virtual devices", len(st.GPUs), st.VirtualDevices)
	if unhealthy > 0 {
		line += fmt.Sprintf(", %d GPUs unhealthy", unhealthy)
	}
	if st.InventoryReachable {
		line += ", inventory reachable"
	} else {
		line += ", inventory unreachable"
	}
	if st.Simulated {
		line = "SIMULATED: " + line
	}
	line += heldLine(st)
	if st.ConfigError != "" {
		line += "; config error, running the last good one: " + firstLine(st.ConfigError)
	} else if !st.Ready && st.LastError != "" {
		line += "; " + firstLine(st.LastError)
	}
	return line
}

// pipeLog gives a GPU its own pipe and log directory under the roots, or,
// in the single layout, the roots themselves (layout.go).
func (c *Config) pipeLog(uuid gpu.UUID) mps.Env {
	if c.single() {
		return mps.Env{PipeDir: c.Host.CudaMPSPipeDirectory, LogDir: c.Host.CudaMPSLogDirectory, Single: true, MultiUser: c.Host.MultiUserServer}
	}
	return mps.Env{
		PipeDir:        filepath.Join(c.Host.CudaMPSPipeDirectory, uuid.String()),
		LogDir:         filepath.Join(c.Host.CudaMPSLogDirectory, uuid.String()),
		VisibleDevices: uuid.String(),
		MultiUser:      c.Host.MultiUserServer,
	}
}
