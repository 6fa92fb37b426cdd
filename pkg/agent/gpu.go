package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/metrics"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/plan"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// mpsStation is the agent's MPS: one control daemon per GPU (or one for
// all, the single layout: layout.go), each prepared with its limits read
// back (here), watched (health.go), retired once out of the plan and
// unused (retire.go), the compute modes it changed remembered (gpu.Modes).
// Its part of /status is the GPUs and the retiring ones. Loop-owned but
// for that part.
type mpsStation struct {
	opts  *Options // the agent's: its runner and GPU backend
	log   *slog.Logger
	met   *telemetry
	modes *gpu.Modes
	// guard stands between the station and its control daemons: the
	// privileged sockets out of the pipe directories, the commands sent
	// remembered (mps.Guard; pkg/acctloop's foreign.go reads them).
	guard *mps.Guard
	gpus  map[gpu.UUID]*gpuState // every GPU the agent runs MPS for
	// layout is the single pipe layout's device list and threads; planned
	// the last plan's devices by GPU.
	layout  singleLayout
	planned map[gpu.UUID][]vdev.Device

	mu       sync.Mutex
	statuses []status.GPU
	retired  []string // the GPUs retiring
}

// prepare is the MPS stage: each planned GPU prepared, or taken as it was
// (prepareGPUs); the GPUs' status and failures handed on in r.
func (m *mpsStation) prepare(ctx context.Context, r *round) error {
	m.layout = layoutOf(r.cfg, r.plan)
	m.planned = r.planned
	r.gpus, r.errs = m.prepareGPUs(ctx, r.cfg, r.plan, r.full)
	r.priorities = map[gpu.UUID]int{}
	for uuid, gs := range m.gpus {
		if gs.limits != (mps.Limits{}) {
			r.priorities[uuid] = gs.limits.ClientPriority
		}
	}
	m.mu.Lock()
	m.statuses = r.gpus
	m.mu.Unlock()
	return nil
}

// status fills the station's part of /status.
func (m *mpsStation) status(st *status.Status) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st.GPUs = append([]status.GPU(nil), m.statuses...)
	st.Retiring = append([]string(nil), m.retired...)
}

// The MPS stage of a reconcile. A GPU is prepared
// (prepareGPU: compute mode, control daemon, limits set and read back) when
// what it must hold changed, when it is not known to be healthy, or when
// the reconcile checks everything (a full one: the first, the periodic one,
// a retry). A reconcile after an edit of the files is not full: a GPU whose
// entry did not change, and whose daemon is healthy, is not asked anything;
// its status is the last preparation's, with what NVML lists now.

// gpuState is what the agent keeps per GPU between reconciles.
type gpuState struct {
	// base talks to the GPU's control daemon; ctl is base bound to the
	// GPU's device ordinal in it (always 0 in the per-GPU layout).
	base   *mps.Controller
	ctl    *mps.Controller
	env    mps.Env
	limits mps.Limits
	// healthy is the last verdict; the health probe compares against it.
	healthy bool
	// enforced: the caps are applied and read back (accounting measures
	// only such GPUs).
	enforced bool
	// applied is what the last preparation that left the GPU healthy
	// applied, last what it showed; dirty is set when the health probe
	// saw the GPU change since.
	applied gpuTarget
	last    status.GPU
	dirty   bool
	// checksSinceSet counts the preparations since the defaults were last
	// set (mustSet).
	checksSinceSet int
}

// setEvery is how often a preparation sets the control daemon's defaults
// even though the getters show them right: every tenth (five minutes at
// the default mps_sync_interval of 30 s). The getters round the memory
// limit to whole GiB, so a drift within a GiB (a hand-set
// set_default_device_pinned_mem_limit) reads as no drift; this repairs it.
// Every drift the getters show is repaired at the next preparation.
const setEvery = 10

// mustSet reports whether a preparation of gs sets the defaults want
// without asking first: a daemon it did not adopt (just started), defaults
// other than the last ones set (the getters could show the old and the new
// limit alike: both within one GiB), or setEvery preparations since they
// were last set.
func mustSet(gs *gpuState, adopted bool, want mps.Limits) bool {
	return !adopted || gs.limits != want || gs.checksSinceSet+1 >= setEvery
}

// gpuTarget is what a GPU's MPS must hold: where its control daemon lives,
// its defaults (which running servers get too), how many devices share it
// and whether the daemon sets its compute mode. Two equal targets need the
// same MPS calls.
type gpuTarget struct {
	env       mps.Env
	limits    mps.Limits
	n         int
	exclusive bool
}

// targetOf is what gp's control daemon, in env, must hold, want being its
// limits.
func targetOf(env mps.Env, cfg *Config, gp plan.GPUPlan, want mps.Limits) gpuTarget {
	return gpuTarget{env: env, limits: want, n: gp.VirtualNumber, exclusive: cfg.Host.SetExclusiveComputeMode}
}

// prepareGPUs is the MPS stage: each planned GPU prepared, or, when full is
// false and nothing about it changed, taken as it was. It returns the
// GPUs' status in plan order and their failures.
//
// In the per-GPU layout each GPU has its own control daemon, so the GPUs are
// prepared at once, one goroutine each: a start (or a full reconcile) then
// waits for the slowest GPU, not for the sum of them. In the single layout
// they share one daemon and are prepared one after the other.
func (m *mpsStation) prepareGPUs(ctx context.Context, cfg *Config, p *plan.Plan, full bool) ([]status.GPU, []error) {
	statuses := make([]status.GPU, len(p.GPUs))
	kinds := make([]metrics.ErrorKind, len(p.GPUs))
	states := make([]*gpuState, len(p.GPUs))
	wants := make([]mps.Limits, len(p.GPUs))
	var todo []int // the GPUs to prepare
	for i, gp := range p.GPUs {
		uuid := gp.GPU.UUID
		gs := m.gpu(cfg, uuid)
		if cfg.single() && gs.env.VisibleDevices != m.layout.visible {
			delete(m.gpus, uuid) // the planned GPUs changed: a controller for the new list
			gs = m.gpu(cfg, uuid)
		}
		states[i] = gs
		wants[i] = m.limitsOf(cfg, gp)
		st := plannedStatus(gp, wants[i])
		st.PipeDirectory = gs.env.PipeDir
		if !full && m.current(cfg, gp, gs, wants[i]) {
			statuses[i] = observed(st, gs.last)
			continue
		}
		statuses[i] = st
		todo = append(todo, i)
	}
	m.rememberModes(cfg, p, todo)
	prepare := func(i int) {
		statuses[i], kinds[i] = m.prepareGPU(ctx, cfg, p.GPUs[i], wants[i], statuses[i])
	}
	if cfg.single() || len(todo) < 2 {
		for _, i := range todo {
			prepare(i)
		}
	} else {
		var wg sync.WaitGroup
		for _, i := range todo {
			wg.Go(func() { prepare(i) })
		}
		wg.Wait()
	}
	var errs []error
	for i, gp := range p.GPUs {
		gs, st := states[i], statuses[i]
		gs.dirty = false
		gs.enforced = st.Enforced
		if st.Error != "" {
			errs = append(errs, withKind(cmp.Or(kinds[i], metrics.ErrorMPS), fmt.Errorf("gpu %s (%s): %s", gp.GPU.PCI, gp.GPU.UUID, st.Error)))
		}
	}
	return statuses, errs
}

// rememberModes records, in one synced write, the compute modes that the
// GPUs of todo lose when prepareGPU sets Exclusive_Process: each
// preparation then finds its GPU's mode recorded and writes nothing, where
// the GPUs of a start otherwise waited for one another's syncs of the file.
// On a failure each preparation remembers its own, and reports it.
func (m *mpsStation) rememberModes(cfg *Config, p *plan.Plan, todo []int) {
	if !cfg.Host.SetExclusiveComputeMode {
		return
	}
	modes := map[gpu.UUID]gpu.ComputeMode{}
	for _, i := range todo {
		if g := p.GPUs[i].GPU; g.ComputeMode != gpu.ComputeModeExclusiveProcess {
			modes[g.UUID] = g.ComputeMode
		}
	}
	if len(modes) < 2 {
		return
	}
	if err := m.modes.RememberAll(modes); err != nil {
		m.log.Debug("compute modes not remembered together; each GPU remembers its own", "err", err)
	}
}

// limitsOf are the defaults the control daemon of gp's GPU must hold: the
// plan's cap (in the single layout, what the shared daemon holds on the
// GPU's ordinal: sharedMemoryLimit), and its daemon's thread percentage
// and client priority.
func (m *mpsStation) limitsOf(cfg *Config, gp plan.GPUPlan) mps.Limits {
	defaults := m.serverDefaults(cfg, gp)
	l := mps.Limits{ClientPriority: defaults.ClientPriority}
	if len(gp.Devices) > 0 {
		l.MemoryLimit, l.ThreadPercentage = gp.Devices[0].MemoryLimit, float64(defaults.ThreadPercentage)
	}
	if cfg.single() {
		l.MemoryLimit = m.sharedMemoryLimit(cfg, gp.GPU.UUID, l.MemoryLimit)
	}
	return l
}

// plannedStatus is what the plan, NVML and the limits to hold say of a GPU,
// before MPS is asked: the status edge of limitsOf.
func plannedStatus(gp plan.GPUPlan, want mps.Limits) status.GPU {
	g := gp.GPU
	return status.GPU{UUID: g.UUID.String(), Index: g.Index, Minor: g.Minor, PCI: g.PCI, Model: g.Name, VirtualNumber: gp.VirtualNumber,
		MemoryTotal: g.MemoryTotal, MemoryUsed: g.MemoryUsed, ComputeMode: g.ComputeMode.String(),
		MemoryLimit: want.MemoryLimit, ThreadPercentage: int(want.ThreadPercentage), ClientPriority: want.ClientPriority,
		QoS: gpuQoS(gp)}
}

// current reports whether gs already holds what gp needs, as its last
// preparation left it healthy and nothing seen since says otherwise.
func (m *mpsStation) current(cfg *Config, gp plan.GPUPlan, gs *gpuState, want mps.Limits) bool {
	exclusiveLost := cfg.Host.SetExclusiveComputeMode && gp.GPU.ComputeMode != gpu.ComputeModeExclusiveProcess
	return !gs.dirty && gs.healthy && gs.enforced && !exclusiveLost && gs.applied == targetOf(gs.env, cfg, gp, want)
}

// observed is planned with what MPS showed at the GPU's last preparation.
func observed(planned, last status.GPU) status.GPU {
	planned.ControlDaemonUp, planned.Servers = last.ControlDaemonUp, last.Servers
	planned.Enforced, planned.Healthy, planned.Reason, planned.Error = last.Enforced, last.Healthy, last.Reason, last.Error
	planned.PrivilegedSocketReachable, planned.PrivilegedSocketReason = last.PrivilegedSocketReachable, last.PrivilegedSocketReason
	return planned
}

// prepareGPU gets one GPU to the point where its devices may be handed out
// (errKind says what failed when it did not): compute mode (when
// configured), a control daemon (adopted, started, or restarted after a
// crash), default limits for future servers and the same limits on running
// servers, in that order, all read back: want (limitsOf). st comes with
// what the plan says of the GPU (plannedStatus) and leaves with what MPS
// showed.
func (m *mpsStation) prepareGPU(ctx context.Context, cfg *Config, gp plan.GPUPlan, want mps.Limits, st status.GPU) (_ status.GPU, errKind metrics.ErrorKind) {
	hc := cfg.Host
	g := gp.GPU
	log := m.log.With("gpu", g.UUID, "pci", g.PCI.String())
	gs := m.gpu(cfg, g.UUID)
	gs.applied = gpuTarget{} // until this preparation succeeds
	fail := func(format string, args ...any) (status.GPU, metrics.ErrorKind) {
		st.Error = fmt.Sprintf(format, args...)
		m.setHealth(gs, log, false, st.Error)
		return st, errKind
	}

	if hc.SetExclusiveComputeMode && g.ComputeMode != gpu.ComputeModeExclusiveProcess {
		if err := m.modes.Remember(g.UUID, g.ComputeMode); err != nil {
			return fail("remembering the compute mode: %v", err)
		}
		if err := m.opts.Backend.SetComputeMode(ctx, g.UUID, gpu.ComputeModeExclusiveProcess); err != nil {
			errKind = metrics.ErrorGPU // NVML refused; other failures here are MPS's
			return fail("setting compute mode Exclusive_Process (set mps_set_exclusive_compute_mode: false to leave it): %v", err)
		}
		log.Info("compute mode set", "from", g.ComputeMode.String(), "to", gpu.ComputeModeExclusiveProcess.String())
		st.ComputeMode = gpu.ComputeModeExclusiveProcess.String()
	}

	adopted, servers, listed, err := gs.ctl.EnsureServers(ctx)
	if err != nil {
		return fail("MPS control daemon: %v", err)
	}
	st.ControlDaemonUp = true
	priv := m.guard.Privileged(gs.env)
	st.PrivilegedSocketReachable, st.PrivilegedSocketReason = priv.Reachable, priv.Reason
	if err := m.bindDevice(cfg, gs, g.UUID, log); err != nil {
		// The single daemon cannot take this GPU's caps until it is idle
		// and restarted (layout.go): unhealthy, healing by itself.
		st.Reason = err.Error()
		m.setHealth(gs, log, false, st.Reason)
		return st, errKind
	}
	if cfg.single() {
		// The shared daemon's limit of this GPU's ordinal depends on the
		// list the daemon runs with, which EnsureServers may just have
		// changed (started or restarted it).
		want = m.limitsOf(cfg, gp)
		st.MemoryLimit = want.MemoryLimit
	}
	if !adopted {
		if gs.limits != (mps.Limits{}) {
			m.met.daemon.ObserveControlDaemonRestart()
			log.Warn("MPS control daemon was gone and is started again; its clients were lost with it", "pipe_directory", gs.env.PipeDir)
		} else {
			log.Info("started MPS control daemon", "pipe_directory", gs.env.PipeDir, "log_directory", gs.env.LogDir)
		}
	}
	// The defaults are read and set only when they differ (or when a drift
	// the getters cannot show is not ruled out: mustSet).
	set, err := gs.ctl.EnsureDefaults(ctx, want, mustSet(gs, adopted, want))
	if err != nil {
		return fail("applying MPS limits: %v", err)
	}
	if set {
		gs.checksSinceSet = 0
	} else {
		gs.checksSinceSet++
	}
	if gs.limits != want && gs.limits != (mps.Limits{}) {
		log.Info("MPS limits changed", "memory_limit_mib", int(want.MemoryLimit), "thread_percentage", want.ThreadPercentage, "client_priority", want.ClientPriority)
	}
	gs.limits = want
	if set || !listed {
		// A server started before the defaults were set took the old
		// ones: list them again, after the set.
		if servers, err = gs.ctl.Servers(ctx); err != nil {
			return fail("listing MPS servers: %v", err)
		}
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
			m.setHealth(gs, log, false, st.Reason)
			return st, errKind
		}
	}
	st.Healthy = true
	m.setHealth(gs, log, true, "")
	gs.applied, gs.last = targetOf(gs.env, cfg, gp, want), st
	return st, errKind
}

// gpu returns the state of one GPU, creating its controller on first sight.
func (m *mpsStation) gpu(cfg *Config, uuid gpu.UUID) *gpuState {
	if gs, ok := m.gpus[uuid]; ok {
		return gs
	}
	env := m.envFor(cfg, uuid)
	ctl := mps.NewController(m.guard.Runner(m.opts.Runner), env, cfg.Host.ControlTimeout, m.log.With("gpu", uuid, "component", "mps"))
	gs := &gpuState{env: env, base: ctl, ctl: ctl, healthy: true}
	m.gpus[uuid] = gs
	return gs
}

// setHealth records a GPU's verdict and logs the transitions.
func (m *mpsStation) setHealth(gs *gpuState, log *slog.Logger, healthy bool, reason string) {
	if healthy != gs.healthy {
		if healthy {
			log.Info("GPU healthy again: its devices are handed out again")
		} else {
			log.Warn("GPU unhealthy: its devices are marked unhealthy and not handed out", "reason", reason)
		}
	}
	gs.healthy = healthy
}
