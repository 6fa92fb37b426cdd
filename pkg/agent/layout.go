package agent

import (
	"fmt"
	"log/slog"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/plan"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// The MPS pipe layout (host.conf mps_pipe_layout, docs/cloudpods.md):
// per GPU, each GPU's control daemon in <root>/<uuid>; or single, ONE
// control daemon in <root> itself for every GPU, as Cloudpods' host agent
// hands its pods CUDA_MPS_PIPE_DIRECTORY=<root>. The single daemon is
// started with CUDA_VISIBLE_DEVICES listing the planned GPUs' UUIDs in PCI
// order, so its device ordinal i is the i-th of them; each GPU's memory cap
// is set on its ordinal, and the one thread percentage every device shares
// is the largest the policy gives any GPU (Cloudpods' own daemon: 100/minN).

// single reports the single layout.
func (c *Config) single() bool { return c.Host.Layout() == config.LayoutSingle }

// singleLayout is what a reconcile learns from the plan for the single
// layout: the daemon's device list and its one thread percentage.
type singleLayout struct {
	visible string
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
	uuids := make([]string, 0, len(p.GPUs))
	for _, gp := range p.GPUs {
		uuids = append(uuids, gp.GPU.UUID.String())
	}
	l.visible = mps.VisibleList(uuids)
	l.defaults = p.SharedDefaults()
	return l
}

// bindDevice points a GPU's controller at its device ordinal in the single
// daemon now running: the ordinal comes from the daemon's recorded device
// list, which is the planned one unless a busy daemon still runs with an
// older list (a GPU added since joins when it is idle and restarted). A
// daemon of unknown device order (started by another program, such as
// Cloudpods' own mps-daemon) cannot have caps set on the right GPU. Either
// way the error is a reason to report the GPU unhealthy (its devices are not
// offered) until the daemon is idle and restarted; it is not a failure.
func (a *Agent) bindDevice(cfg *Config, gs *gpuState, uuid gpu.UUID, log *slog.Logger) error {
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
	if running != a.layout.visible {
		log.Warn("the single MPS control daemon still serves an older set of GPUs", "running", running, "configured", a.layout.visible)
	}
	gs.ctl = gs.base.ForDevice(i)
	return nil
}

// envFor is the MPS environment of a GPU in the layout in force.
func (a *Agent) envFor(cfg *Config, uuid gpu.UUID) mps.Env {
	env := cfg.pipeLog(uuid)
	if cfg.single() {
		env.VisibleDevices = a.layout.visible
	}
	return env
}

// retiring is the state of a GPU out of the plan, and whether its control
// daemon is the single layout's shared one. A per-GPU directory
// <root>/<uuid> found in the single layout is a daemon of the per-GPU
// layout left from before a switch: it is retired like any per-GPU daemon.
func (a *Agent) retiring(cfg *Config, uuid gpu.UUID, log *slog.Logger) (*gpuState, bool) {
	if gs, ok := a.gpus[uuid]; ok {
		return gs, gs.env.Single
	}
	if !cfg.single() {
		return a.gpu(cfg, uuid), false
	}
	perGPU := *cfg
	hc := *cfg.Host
	hc.PipeLayout = config.LayoutPerGPU
	perGPU.Host = &hc
	env := perGPU.pipeLog(uuid)
	ctl := mps.NewController(a.opts.Runner, env, cfg.Host.ControlTimeout, log.With("component", "mps"))
	gs := &gpuState{env: env, base: ctl, ctl: ctl, healthy: true}
	a.gpus[uuid] = gs
	return gs, false
}

// singleDaemon stands for the single layout's daemon where a GPU UUID is
// expected (teardown).
const singleDaemon = "single MPS control daemon (all GPUs)"
