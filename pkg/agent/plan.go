package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/entries"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/metrics"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/plan"
)

// buildPlan lists the GPUs, reads their NUMA nodes from sysfs and builds the
// plan of cfg against them; it also returns the GPUs.
func buildPlan(ctx context.Context, backend gpu.Backend, cfg *Config, sysfsRoot, devRoot string) (*plan.Plan, []gpu.Info, error) {
	gpus, err := backend.Devices(ctx)
	if err != nil {
		return nil, nil, withKind(metrics.ErrorGPU, fmt.Errorf("listing GPUs: %w", err))
	}
	gpu.FillNUMA(sysfsRoot, gpus)
	p, err := planFor(cfg, gpus, sysfsRoot, devRoot)
	return p, gpus, err
}

// planFor builds the plan of cfg against gpus and checks what only the plan
// tells: that the MPS sockets of every planned GPU fit a unix socket path.
func planFor(cfg *Config, gpus []gpu.Info, sysfsRoot, devRoot string) (*plan.Plan, error) {
	p, err := plan.Build(cfg.Host, cfg.Devices, gpus, gpu.Resolver{SysfsRoot: sysfsRoot, DevRoot: devRoot})
	return p, errors.Join(err, checkPipeDirs(cfg, p))
}

// checkPipeDirs refuses a pipe root under which a planned GPU's control
// sockets could not bind: the control daemon would fail with nothing but
// "Cannot find MPS control daemon process".
func checkPipeDirs(cfg *Config, p *plan.Plan) error {
	if p == nil {
		return nil
	}
	for _, g := range p.GPUs {
		if err := mps.CheckPipeDir(cfg.pipeLog(g.GPU.UUID).PipeDir); err != nil {
			hc := cfg.Host
			return &config.Error{File: cmp.Or(hc.Path, "host.conf"), Line: hc.Line("cuda_mps_pipe_directory"), Field: "cuda_mps_pipe_directory",
				Msg: fmt.Sprintf("too long for the MPS sockets under it: %v", err)}
		}
	}
	return nil
}

// CheckConfig is `mps-daemon check-config`: cfg validated as the daemon
// validates it at start and on a reload (Validate), then the plan written
// to w. Empty roots are host.conf's. It touches neither MPS nor the
// inventory nor the compute mode.
func CheckConfig(ctx context.Context, w io.Writer, cfg *Config, mode Mode, backend gpu.Backend, sysfsRoot, devRoot string) error {
	p, _, err := Validate(ctx, cfg, mode, backend, sysfsRoot, devRoot)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "host.conf: %s\n", cfg.Host.Path)
	if cfg.Devices != nil {
		fmt.Fprintf(w, "devices:   %s\n", cfg.Devices.Path)
		for _, e := range cfg.Devices.Skipped {
			fmt.Fprintf(w, "skipped:   %s:%d: type %q belongs to another agent\n", cfg.Devices.Path, e.Line, e.Type)
		}
	}
	fmt.Fprintf(w, "view:      %s\n", entries.DescribeView(cfg.Host.ViewLibrary))
	fmt.Fprintln(w)
	return p.Write(w)
}
