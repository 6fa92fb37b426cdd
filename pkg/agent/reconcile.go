package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/metrics"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/plan"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// gpuState is what the agent keeps per GPU between reconciles.
type gpuState struct {
	// base talks to the GPU's control daemon; ctl is base bound to the
	// GPU's device ordinal in it (always 0 in the per-GPU layout).
	base   *mps.Controller
	ctl    *mps.Controller
	env    mps.Env
	limits mps.Limits
	// healthy and reason are the last reconcile's verdict; the health probe
	// compares against them.
	healthy bool
	reason  string
	// enforced: the caps are applied and read back (accounting measures
	// only such GPUs).
	enforced bool
}

// Reconcile brings MPS and the inventory in line with the configuration once:
// plan; per GPU compute mode, control daemon, default limits and the limits
// of running servers (read back); only then the inventory. A GPU whose MPS
// fails keeps its devices in the inventory marked unhealthy, so nothing is
// handed out on it and nothing held is lost. A configuration or GPU error
// changes nothing.
func (a *Agent) Reconcile(ctx context.Context) (err error) {
	start := time.Now()
	defer func() { a.met.observe(time.Since(start), err) }()
	cfg := a.config()
	p, gpus, err := a.plan(ctx, cfg)
	if err != nil {
		return a.fail(withKind(metrics.ErrorConfig, fmt.Errorf("invalid configuration, nothing changed: %w", err)))
	}
	a.layout = layoutOf(cfg, p)
	a.present = map[string]gpu.Info{}
	for _, g := range gpus {
		a.present[g.UUID] = g
	}

	// MPS first: it must work even while the inventory is away.
	statuses := make([]status.GPU, 0, len(p.GPUs))
	var gpuErrs []error
	planned := map[string]bool{}
	a.planned = map[string][]vdev.Device{}
	for _, gp := range p.GPUs {
		st, errKind := a.prepareGPU(ctx, cfg, gp)
		statuses = append(statuses, st)
		planned[gp.GPU.UUID] = true
		a.planned[gp.GPU.UUID] = gp.Devices
		a.gpus[gp.GPU.UUID].enforced = st.Enforced
		if st.Error != "" {
			gpuErrs = append(gpuErrs, withKind(cmp.Or(errKind, metrics.ErrorMPS), fmt.Errorf("gpu %s (%s): %s", gp.GPU.PCI, gp.GPU.UUID, st.Error)))
		}
	}

	// The CDI spec before the inventory: a device must be startable by its
	// <GPU UUID>::<i> name before anyone can be given it.
	a.writeCDI(cfg, p, statuses)
	hostID, hostName, err := a.ensureHost(ctx, cfg)
	if err != nil {
		a.setGPUs(statuses, 0, false)
		return a.fail(withKind(metrics.ErrorInventory, err))
	}
	desired := []api.IsolatedDevice{}
	byName := map[vdev.Name]vdev.Device{}
	for i, gp := range p.GPUs {
		for _, d := range gp.Devices {
			desired = append(desired, rowOf(hostID, d, statuses[i].Healthy))
			byName[d.Name()] = d
		}
	}
	res, err := a.opts.Inventory.SyncDevices(ctx, hostID, desired)
	if err != nil {
		a.setGPUs(statuses, 0, false)
		return a.fail(withKind(metrics.ErrorInventory, fmt.Errorf("syncing devices with the inventory: %w", err)))
	}
	listed, order := a.byName(res.Devices, byName)
	a.listed = listed
	a.writeCDI(cfg, p, statuses)
	a.setDevices(order)
	retiring := a.retire(ctx, cfg, planned)
	a.setGPUs(statuses, len(desired), true)
	a.mu.Lock()
	a.status.Retiring = retiring
	a.mu.Unlock()
	a.log.Info("reconciled",
		"simulated", a.opts.Simulated, "host", hostName, "gpus", len(p.GPUs), "virtual_devices", len(desired),
		"created", res.Created, "updated", res.Updated, "deleted", res.Deleted, "held", len(res.Held),
		"duration", time.Since(start).Round(time.Millisecond).String())
	if len(gpuErrs) > 0 {
		return a.fail(errors.Join(gpuErrs...))
	}
	a.succeed()
	return nil
}

// plan builds the plan of cfg against the GPUs present.
func (a *Agent) plan(ctx context.Context, cfg *Config) (*plan.Plan, []gpu.Info, error) {
	return buildPlan(ctx, a.opts.Backend, cfg, a.opts.SysfsRoot, a.opts.DevRoot)
}

// prepareGPU gets one GPU to the point where its devices may be handed out
// (errKind says what failed when it did not):
// compute mode (when configured), a control daemon (adopted, started, or
// restarted after a crash), default limits for future servers and the same
// limits on running servers, in that order, all read back.
func (a *Agent) prepareGPU(ctx context.Context, cfg *Config, gp plan.GPUPlan) (st status.GPU, errKind metrics.ErrorKind) {
	hc := cfg.Host
	g := gp.GPU
	log := a.log.With("gpu", g.UUID, "pci", g.PCI.String())
	st = status.GPU{UUID: g.UUID, Index: g.Index, Minor: g.Minor, PCI: g.PCI, Model: g.Name, VirtualNumber: gp.N,
		MemoryTotal: g.MemoryTotal, MemoryUsed: g.MemoryUsed, ComputeMode: g.ComputeMode.String()}
	defaults := a.serverDefaults(cfg, gp)
	if len(gp.Devices) > 0 {
		st.MemoryLimit = gp.Devices[0].MemoryLimit
		st.ThreadPercentage = defaults.ThreadPercentage
	}
	st.ClientPriority, st.QoS = defaults.ClientPriority, gpuQoS(gp)
	gs := a.gpu(cfg, g.UUID, log)
	if cfg.single() && gs.env.VisibleDevices != a.layout.visible {
		delete(a.gpus, g.UUID) // the planned GPUs changed: a controller for the new list
		gs = a.gpu(cfg, g.UUID, log)
	}
	st.PipeDirectory = gs.env.PipeDir
	fail := func(format string, args ...any) (status.GPU, metrics.ErrorKind) {
		st.Error = fmt.Sprintf(format, args...)
		a.setHealth(gs, log, false, st.Error)
		return st, errKind
	}

	if hc.SetExclusiveComputeMode && g.ComputeMode != gpu.ComputeModeExclusiveProcess {
		if err := a.state.rememberMode(g.UUID, g.ComputeMode); err != nil {
			return fail("remembering the compute mode: %v", err)
		}
		if err := a.opts.Backend.SetComputeMode(ctx, g.UUID, gpu.ComputeModeExclusiveProcess); err != nil {
			errKind = metrics.ErrorGPU // NVML refused; other failures here are MPS's
			return fail("setting compute mode Exclusive_Process (set mps_set_exclusive_compute_mode: false to leave it): %v", err)
		}
		log.Info("compute mode set", "from", g.ComputeMode.String(), "to", gpu.ComputeModeExclusiveProcess.String())
		st.ComputeMode = gpu.ComputeModeExclusiveProcess.String()
	}

	adopted, err := gs.ctl.Ensure(ctx)
	if err != nil {
		return fail("MPS control daemon: %v", err)
	}
	st.ControlDaemonUp = true
	if err := a.bindDevice(cfg, gs, g.UUID, log); err != nil {
		// The single daemon cannot take this GPU's caps until it is idle
		// and restarted (layout.go): unhealthy, healing by itself.
		st.Reason = err.Error()
		a.setHealth(gs, log, false, st.Reason)
		return st, errKind
	}
	if !adopted {
		if gs.limits != (mps.Limits{}) {
			a.met.daemon.ObserveControlDaemonRestart()
			log.Warn("MPS control daemon was gone and is started again; its clients were lost with it", "pipe_directory", gs.env.PipeDir)
		} else {
			log.Info("started MPS control daemon", "pipe_directory", gs.env.PipeDir, "log_directory", gs.env.LogDir)
		}
	}
	want := mps.Limits{MemoryLimit: st.MemoryLimit, ThreadPercentage: float64(st.ThreadPercentage), ClientPriority: st.ClientPriority}
	if err := gs.ctl.SetDefaults(ctx, want); err != nil {
		return fail("applying MPS limits: %v", err)
	}
	if gs.limits != want && gs.limits != (mps.Limits{}) {
		log.Info("MPS limits changed", "memory_limit_mib", int(want.MemoryLimit), "thread_percentage", want.ThreadPercentage, "client_priority", want.ClientPriority)
	}
	gs.limits = want
	servers, err := gs.ctl.Servers(ctx)
	if err != nil {
		return fail("listing MPS servers: %v", err)
	}
	st.Enforced = true
	for _, pid := range servers {
		got, err := gs.ctl.ServerLimits(ctx, pid)
		if err != nil {
			// Gone, or going (an idle server shut down answers nothing):
			// with no client it serves no one; it is read again next time.
			if _, clients, serr := serverState(ctx, gs, pid); errors.Is(serr, errVanished) || (serr == nil && len(clients) == 0) {
				log.Debug("MPS server without clients did not answer; left until the next reconcile", "server", pid, "err", err)
				continue
			}
			return fail("%v", err)
		}
		if !mps.LimitsMatch(got, want) {
			if err := gs.ctl.SetServerLimits(ctx, pid, want); err != nil {
				if vanished(ctx, gs, pid) {
					continue
				}
				st.Enforced = false
				return fail("%v", err)
			}
			log.Info("limits of running MPS server changed", "server", pid, "memory_limit_mib", int(want.MemoryLimit), "thread_percentage", want.ThreadPercentage)
		}
		state, clients, err := serverState(ctx, gs, pid)
		if errors.Is(err, errVanished) {
			continue
		}
		if err != nil {
			return fail("%v", err)
		}
		st.Servers = append(st.Servers, status.Server{PID: pid, Status: string(state), Clients: len(clients)})
		if state != mps.ServerActive && len(clients) > 0 {
			st.Reason = fmt.Sprintf("MPS server %d is %s (clients %v); it recovers once they exit", pid, state, clients)
			a.setHealth(gs, log, false, st.Reason)
			return st, errKind
		}
	}
	st.Healthy = true
	a.setHealth(gs, log, true, "")
	return st, errKind
}

// gpu returns the state of one GPU, creating its controller on first sight.
func (a *Agent) gpu(cfg *Config, uuid string, log *slog.Logger) *gpuState {
	if gs, ok := a.gpus[uuid]; ok {
		return gs
	}
	env := a.envFor(cfg, uuid)
	ctl := mps.NewController(a.opts.Runner, env, cfg.Host.ControlTimeout, log.With("component", "mps"))
	gs := &gpuState{env: env, base: ctl, ctl: ctl, healthy: true}
	a.gpus[uuid] = gs
	return gs
}

// setHealth records a GPU's verdict and logs the transitions.
func (a *Agent) setHealth(gs *gpuState, log *slog.Logger, healthy bool, reason string) {
	if healthy != gs.healthy {
		if healthy {
			log.Info("GPU healthy again: its devices are handed out again")
		} else {
			log.Warn("GPU unhealthy: its devices are marked unhealthy and not handed out", "reason", reason)
		}
	}
	gs.healthy, gs.reason = healthy, reason
}

// ensureHost registers the host once per process; the inventory finds it by
// name, so a restarted daemon gets the same host row.
func (a *Agent) ensureHost(ctx context.Context, cfg *Config) (id, name string, err error) {
	name, err = HostName(cfg.Host)
	if err != nil {
		return "", "", err
	}
	if a.hostID != "" {
		return a.hostID, name, nil
	}
	h, err := a.opts.Inventory.EnsureHost(ctx, name)
	if err != nil {
		return "", "", fmt.Errorf("registering host %q with the inventory: %w", name, err)
	}
	a.hostID = h.ID
	a.mu.Lock()
	a.status.HostID, a.status.HostName = h.ID, name
	a.mu.Unlock()
	a.log.Info("host registered", "host", name, "host_id", h.ID)
	return h.ID, name, nil
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
func (c *Config) pipeLog(uuid string) mps.Env {
	if c.single() {
		return mps.Env{PipeDir: c.Host.CudaMPSPipeDirectory, LogDir: c.Host.CudaMPSLogDirectory, Single: true, MultiUser: c.Host.MultiUserServer}
	}
	return mps.Env{
		PipeDir:        filepath.Join(c.Host.CudaMPSPipeDirectory, uuid),
		LogDir:         filepath.Join(c.Host.CudaMPSLogDirectory, uuid),
		VisibleDevices: uuid,
		MultiUser:      c.Host.MultiUserServer,
	}
}
