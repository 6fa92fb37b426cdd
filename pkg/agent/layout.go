package agent

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/plan"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// The MPS pipe layout (host.conf mps_pipe_layout, docs/cloudpods.md):
// per GPU, each GPU's control daemon in <root>/<uuid>; or single, ONE
// control daemon in <root> itself for every GPU, as Cloudpods' host agent
// hands its pods CUDA_MPS_PIPE_DIRECTORY=<root>. The single daemon is
// started with CUDA_VISIBLE_DEVICES listing the planned GPUs' UUIDs, so its
// device ordinal i is the i-th of them. MPS holds a client's ordinal k to
// the daemon's limit of ordinal k, and our containers see their own GPU
// alone (CUDA_VISIBLE_DEVICES), as their ordinal 0, lowering its limit to
// their device's cap: ordinal 0 holds the largest cap of any GPU, every
// other ordinal its own GPU's (plan.SharedMemoryLimits). The list puts the
// GPU of the largest cap first (then PCI order), so that ordinal 0's limit
// is that GPU's own cap too, and a client that sees every GPU (Cloudpods'
// pods) is held to each GPU's own cap (plan.SharedOrder). The one thread
// percentage every device shares is likewise the largest the policy gives
// any GPU (Cloudpods' own daemon: 100/minN).

// single reports the single layout.
func (c *Config) single() bool { return c.Host.Layout() == config.LayoutSingle }

// singleLayout is what a reconcile learns from the plan for the single
// layout: the daemon's device list and its one thread percentage.
type singleLayout struct {
	visible string
	// plan is the plan the layout is of, whose caps the daemon's ordinals
	// hold (sharedMemoryLimit).
	plan *plan.Plan
	// defaults are the one daemon's defaults: the largest share of any of
	// its devices and the most protective priority (vdev.MostProtective).
	defaults vdev.ServerDefaults
}

// layoutOf is the single layout of plan p (zero in the per-GPU layout).
func layoutOf(cfg *Config, p *plan.Plan) singleLayout {
	if !cfg.single() {
		return singleLayout{}
	}
	var l singleLayout
	// The edge: the control's environment is strings (pkg/mps).
	order := p.SharedOrder()
	env := make([]string, len(order))
	for i, u := range order {
		env[i] = u.String()
	}
	l.visible = mps.VisibleList(env)
	l.defaults = p.SharedDefaults()
	l.plan = p
	return l
}

// sharedMemoryLimit is the limit the single daemon must hold on the
// ordinal of the GPU uuid, whose own cap is own: plan.SharedMemoryLimits
// over the device list the running daemon was started with (a busy daemon
// may still serve an older one: bindDevice), or the planned one. A GPU it
// does not serve keeps its own cap: bindDevice reports it unhealthy.
func (m *mpsStation) sharedMemoryLimit(cfg *Config, uuid gpu.UUID, own units.MiB) units.MiB {
	visible, known := mps.RecordedDevices(m.envFor(cfg, uuid).PipeDir)
	if !known {
		visible = m.layout.visible
	}
	var order []gpu.UUID
	for _, u := range strings.Split(visible, ",") {
		order = append(order, gpu.UUID(u))
	}
	i := slices.Index(order, uuid)
	if i < 0 || m.layout.plan == nil {
		return own
	}
	return m.layout.plan.SharedMemoryLimits(order)[i]
}

// bindDevice points a GPU's controller at its device ordinal in the single
// daemon now running: the ordinal comes from the daemon's recorded device
// list, which is the planned one unless a busy daemon still runs with an
// older list (a GPU added since joins when it is idle and restarted). A
// daemon of unknown device order (started by another program, such as
// Cloudpods' own mps-daemon) cannot have caps set on the right GPU. Either
// way the error is a reason to report the GPU unhealthy (its devices are not
// offered) until the daemon is idle and restarted; it is not a failure.
func (m *mpsStation) bindDevice(cfg *Config, gs *gpuState, uuid gpu.UUID, log *slog.Logger) error {
	if !cfg.single() {
		return nil
	}
	running, known := mps.RecordedDevices(gs.env.PipeDir)
	if !known {
		return fmt.Errorf("the MPS control daemon in %s was started by another program with CUDA's own device order, which cannot be known: caps cannot be set on the right GPU; it is restarted with a known order once no client is connected", gs.env.PipeDir)
	}
	i, ok := mps.Ordinal(running, uuid.String())
	if !ok {
		return fmt.Errorf("the MPS control daemon in %s serves %s, not this GPU: it is restarted with the configured GPUs once no client is connected", gs.env.PipeDir, running)
	}
	if running != m.layout.visible {
		log.Warn("the single MPS control daemon still serves an older set of GPUs", "running", running, "configured", m.layout.visible)
	}
	gs.ctl = gs.base.ForDevice(i)
	return nil
}

// envFor is the MPS environment of a GPU in the layout in force.
func (m *mpsStation) envFor(cfg *Config, uuid gpu.UUID) mps.Env {
	env := cfg.pipeLog(uuid)
	if cfg.single() {
		env.VisibleDevices = m.layout.visible
	}
	return env
}

// retiring is the state of a GPU out of the plan, and whether its control
// daemon is the single layout's shared one. A per-GPU directory
// <root>/<uuid> found in the single layout is a daemon of the per-GPU
// layout left from before a switch: it is retired like any per-GPU daemon.
func (m *mpsStation) retiring(cfg *Config, uuid gpu.UUID, log *slog.Logger) (*gpuState, bool) {
	if gs, ok := m.gpus[uuid]; ok {
		return gs, gs.env.Single
	}
	if !cfg.single() {
		return m.gpu(cfg, uuid), false
	}
	perGPU := *cfg
	hc := *cfg.Host
	hc.PipeLayout = config.LayoutPerGPU
	perGPU.Host = &hc
	env := perGPU.pipeLog(uuid)
	ctl := mps.NewController(m.guard.Runner(m.opts.Runner), env, cfg.Host.ControlTimeout, log.With("component", "mps"))
	gs := &gpuState{env: env, base: ctl, ctl: ctl, healthy: true}
	m.gpus[uuid] = gs
	return gs, false
}

// singleDaemon stands for the single layout's daemon where a GPU UUID is
// expected (teardown).
const singleDaemon = "single MPS control daemon (all GPUs)"
