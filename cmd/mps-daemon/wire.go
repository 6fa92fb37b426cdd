package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"yunion.io/x/mps-daemon/pkg/agent"
	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/gpu/nvml"
	"yunion.io/x/mps-daemon/pkg/gpu/nvmlsim"
	"yunion.io/x/mps-daemon/pkg/logging"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
)

// host is the GPU side of the wiring: real NVML and nvidia-cuda-mps-control,
// or a simulated host.
type host struct {
	backend gpu.Backend
	// nvml is backend as the NVML adapter it is, real or simulated (the
	// driver's version, which the Kubernetes mode publishes).
	nvml               *nvml.Adapter
	runner             mps.Runner
	sysfsRoot, devRoot string
}

func openHost(f flags, cfg *agent.Config, log *slog.Logger) (*host, error) {
	if f.simulate == "" {
		b, err := nvml.New(log)
		if err != nil {
			return nil, err
		}
		return &host{backend: b, nvml: b, runner: mps.NewExecRunner(cfg.Host.ControlBinary)}, nil
	}
	log.Warn("SIMULATED HOST: GPUs and MPS are simulated, no real GPU is shared", "profile", f.simulate)
	b, sim, err := nvmlsim.New(f.simulate, filepath.Join(cfg.Host.StateDirectory, "simulated-host"), log)
	if err != nil {
		return nil, err
	}
	return &host{backend: b, nvml: b, runner: mpssim.New(log.With("component", "mps-sim")), sysfsRoot: sim.SysfsRoot(), devRoot: sim.DevRoot()}, nil
}

// simProfiles lists the simulated hosts' profiles, for --simulate's help.
func simProfiles() string { return fmt.Sprint(nvmlsim.Profiles()) }

// loaded is what every command that works on the host starts from: the
// logger, both configuration files and the host's GPUs (real or
// simulated). The caller closes backend.
type loaded struct {
	log *slog.Logger
	cfg *agent.Config
	*host
}

// load reads the configuration and opens the host. To serve, the
// configuration is validated first for the mode as check-config and a
// reload validate it (agent.Validate), so either mode refuses at start
// what they refuse, with the same message and before anything is wired;
// tearing down takes any readable one, and check-config validates itself.
func load(ctx context.Context, f flags, mode agent.Mode, validate bool) (*loaded, error) {
	log, err := logging.FromEnv(os.Stderr, f.logLevel, os.Getenv)
	if err != nil {
		return nil, err
	}
	cfg, err := agent.LoadConfig(f.config)
	if err != nil {
		return nil, err
	}
	h, err := openHost(f, cfg, log)
	if err != nil {
		return nil, err
	}
	if validate {
		if _, _, err := agent.Validate(ctx, cfg, mode, h.backend, h.sysfsRoot, h.devRoot); err != nil {
			h.backend.Close()
			return nil, err
		}
	}
	return &loaded{log: log, cfg: cfg, host: h}, nil
}

// wiring is what serving and tearing down in the Cloudpods mode need.
type wiring struct {
	*loaded
	inv *backend.Rows
	// where names the inventory, for the start line.
	where string
}

// wire loads the configuration (validated to serve, see load) and opens
// the inventory host.conf chooses, on the agent's edge (backend.Rows). To
// serve, the host's registration begins at once.
func wire(ctx context.Context, f flags, validate bool) (*wiring, error) {
	l, err := load(ctx, f, agent.ModeCloudpods, validate)
	if err != nil {
		return nil, err
	}
	store, where, err := inventory(l.cfg, l.log)
	if err != nil {
		l.backend.Close()
		return nil, err
	}
	var ahead string
	if validate {
		ahead, _ = agent.HostName(l.cfg.Host) // unreadable: the reconcile reports it
	}
	inv := backend.NewRows(ctx, store, ahead, l.log.With("component", "inventory"))
	return &wiring{loaded: l, inv: inv, where: where}, nil
}

// forward turns SIGHUPs into reload requests until ctx ends; requests that
// arrive during a reload collapse into one.
func forward(ctx context.Context, sigs <-chan os.Signal, reload chan<- struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-sigs:
			select {
			case reload <- struct{}{}:
			default:
			}
		}
	}
}
