package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/plan"
)

// Status is what the agent last did, for /readyz, /status and the logs.
type Status struct {
	// Ready is true once a reconcile registered every planned device with
	// enforced caps; it stays true until one fails.
	Ready          bool        `json:"ready"`
	Simulated      bool        `json:"simulated"`
	HostID         string      `json:"host_id,omitempty"`
	HostName       string      `json:"host_name,omitempty"`
	LastReconcile  time.Time   `json:"last_reconcile"`
	LastError      string      `json:"last_error,omitempty"`
	VirtualDevices int         `json:"virtual_devices"`
	GPUs           []GPUStatus `json:"gpus"`
}

// GPUStatus is one planned GPU.
type GPUStatus struct {
	UUID             string `json:"uuid"`
	PCI              string `json:"pci"`
	Model            string `json:"model"`
	VirtualNumber    int    `json:"virtual_number"`
	MemoryLimitMiB   int    `json:"memory_limit_mib"`
	ThreadPercentage int    `json:"thread_percentage"`
	PipeDirectory    string `json:"pipe_directory"`
	// Enforced is true when MPS holds the caps (read back) and the GPU's
	// devices are offered.
	Enforced bool   `json:"enforced"`
	Error    string `json:"error,omitempty"`
}

// Reconcile brings MPS and the inventory in line with the configuration once:
// plan, then per GPU compute mode, control daemon and limits (read back), and
// only then the inventory, holding only the devices of GPUs whose caps are
// enforced. A configuration or GPU error changes nothing.
func (a *Agent) Reconcile(ctx context.Context) (err error) {
	start := time.Now()
	defer func() { a.met.observe(time.Since(start), err) }()
	hc := a.opts.Config.Host

	gpus, err := a.opts.Backend.Devices(ctx)
	if err != nil {
		return a.fail(fmt.Errorf("listing GPUs: %w", err))
	}
	gpu.FillNUMA(a.opts.SysfsRoot, gpus)
	p, err := plan.Build(hc, a.opts.Config.Devices, gpus, gpu.Resolver{SysfsRoot: a.opts.SysfsRoot, DevRoot: a.opts.DevRoot})
	if err != nil {
		return a.fail(fmt.Errorf("invalid configuration, nothing changed: %w", err))
	}

	// MPS first: it must work even while the inventory is away.
	var gpuErrs []error
	var enforced []plan.GPUPlan
	statuses := make([]GPUStatus, 0, len(p.GPUs))
	for _, gp := range p.GPUs {
		st := a.prepareGPU(ctx, gp)
		statuses = append(statuses, st)
		if st.Error != "" {
			gpuErrs = append(gpuErrs, fmt.Errorf("gpu %s (%s): %s", gp.GPU.PCI, gp.GPU.UUID, st.Error))
			continue
		}
		enforced = append(enforced, gp)
	}

	hostID, hostName, err := a.ensureHost(ctx)
	if err != nil {
		a.setGPUs(statuses, 0)
		return a.fail(err)
	}
	desired := []api.IsolatedDevice{}
	for _, gp := range enforced {
		for _, d := range gp.Devices {
			desired = append(desired, d.API(hostID))
		}
	}

	res, err := a.opts.Inventory.SyncDevices(ctx, hostID, desired)
	if err != nil {
		a.setGPUs(statuses, 0)
		return a.fail(fmt.Errorf("syncing devices with the inventory: %w", err))
	}
	a.setGPUs(statuses, len(desired))
	a.log.Info("reconciled",
		"simulated", a.opts.Simulated, "host", hostName, "gpus", len(p.GPUs), "virtual_devices", len(desired),
		"created", res.Created, "updated", res.Updated, "deleted", res.Deleted, "held", len(res.Held),
		"duration", time.Since(start).Round(time.Millisecond).String())
	if len(gpuErrs) > 0 {
		return a.fail(errors.Join(gpuErrs...))
	}
	a.mu.Lock()
	a.status.Ready = true
	a.status.LastError = ""
	a.status.LastReconcile = time.Now()
	a.mu.Unlock()
	a.met.ready.Set(1)
	return nil
}

// prepareGPU gets one GPU to the point where its devices may be offered:
// compute mode (when configured), a control daemon (adopted or started) and
// the limits applied and read back.
func (a *Agent) prepareGPU(ctx context.Context, gp plan.GPUPlan) GPUStatus {
	hc := a.opts.Config.Host
	g := gp.GPU
	log := a.log.With("gpu", g.UUID, "pci", g.PCI.String())
	st := GPUStatus{UUID: g.UUID, PCI: g.PCI.String(), Model: g.Name, VirtualNumber: gp.N}
	if len(gp.Devices) > 0 {
		st.MemoryLimitMiB = gp.Devices[0].MemoryLimitMiB
		st.ThreadPercentage = gp.Devices[0].ThreadPercentage
	}
	env := mps.Env{
		PipeDir:        filepath.Join(hc.CudaMPSPipeDirectory, g.UUID),
		LogDir:         filepath.Join(hc.CudaMPSLogDirectory, g.UUID),
		VisibleDevices: g.UUID,
	}
	st.PipeDirectory = env.PipeDir

	if hc.SetExclusiveComputeMode && g.ComputeMode != gpu.ComputeModeExclusiveProcess {
		if err := a.state.rememberMode(g.UUID, g.ComputeMode); err != nil {
			st.Error = fmt.Sprintf("remembering the compute mode: %v", err)
			return st
		}
		if err := a.opts.Backend.SetComputeMode(ctx, g.UUID, gpu.ComputeModeExclusiveProcess); err != nil {
			st.Error = fmt.Sprintf("setting compute mode Exclusive_Process (set mps_set_exclusive_compute_mode: false to leave it): %v", err)
			return st
		}
		log.Info("compute mode set", "from", g.ComputeMode.String(), "to", gpu.ComputeModeExclusiveProcess.String())
	}

	ctl := a.controller(g.UUID, env, log)
	adopted, err := ctl.Ensure(ctx)
	if err != nil {
		st.Error = fmt.Sprintf("MPS control daemon: %v", err)
		return st
	}
	if adopted {
		log.Debug("adopted running MPS control daemon", "pipe_directory", env.PipeDir)
	} else {
		log.Info("started MPS control daemon", "pipe_directory", env.PipeDir, "log_directory", env.LogDir)
	}
	want := mps.Limits{PinnedMemMiB: st.MemoryLimitMiB, ThreadPercentage: float64(st.ThreadPercentage)}
	if err := ctl.SetDefaults(ctx, want); err != nil {
		st.Error = fmt.Sprintf("applying MPS limits: %v", err)
		return st
	}
	st.Enforced = true
	return st
}

func (a *Agent) controller(uuid string, env mps.Env, log *slog.Logger) *mps.Controller {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.controllers[uuid]; ok {
		return c
	}
	c := mps.NewController(a.opts.Runner, env, a.opts.Config.Host.ControlTimeout, log.With("component", "mps"))
	a.controllers[uuid] = c
	return c
}

// ensureHost registers the host once per process; the inventory finds it by
// name, so a restarted daemon gets the same host row.
func (a *Agent) ensureHost(ctx context.Context) (id, name string, err error) {
	name, err = HostName(a.opts.Config.Host)
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

func (a *Agent) setGPUs(gpus []GPUStatus, devices int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.status.GPUs = gpus
	a.status.VirtualDevices = devices
	a.met.gpus.Set(float64(len(gpus)))
	a.met.devices.Set(float64(devices))
}

func (a *Agent) fail(err error) error {
	a.mu.Lock()
	a.status.Ready = false
	a.status.LastError = err.Error()
	a.status.LastReconcile = time.Now()
	a.mu.Unlock()
	a.met.ready.Set(0)
	return err
}
