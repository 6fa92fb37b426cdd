// Command mps-daemon is the host agent: it shares each configured NVIDIA GPU
// through CUDA MPS and registers the virtual devices with the inventory.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"yunion.io/x/mps-daemon/pkg/agent"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/gpu/nvml"
	"yunion.io/x/mps-daemon/pkg/inventory/client"
	"yunion.io/x/mps-daemon/pkg/logging"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/version"
)

type flags struct {
	config   string
	simulate string
	logLevel string
}

func main() {
	os.Exit(run())
}

func run() int {
	var f flags
	root := &cobra.Command{
		Use:           "mps-daemon",
		Short:         "Share NVIDIA GPUs through CUDA MPS and register the virtual devices with the inventory",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		Version:       version.Version,
		RunE:          func(cmd *cobra.Command, _ []string) error { return serve(cmd.Context(), f) },
	}
	root.PersistentFlags().StringVar(&f.config, "config", "/etc/yunion/host.conf", "path of host.conf")
	root.PersistentFlags().StringVar(&f.simulate, "simulate", "", "run against a SIMULATED host instead of NVML and nvidia-cuda-mps-control, e.g. 8xH100 (profiles: "+fmt.Sprint(nvml.SimProfiles())+")")
	root.PersistentFlags().StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	root.AddCommand(&cobra.Command{
		Use:   "check-config",
		Short: "Validate host.conf and the device YAML against the GPUs, print the plan, touch nothing",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return checkConfig(cmd.Context(), f) },
	})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "mps-daemon:", err)
		return 1
	}
	return 0
}

// host is the GPU side of the wiring: real NVML and nvidia-cuda-mps-control,
// or a simulated host.
type host struct {
	backend            gpu.Backend
	runner             mps.Runner
	sysfsRoot, devRoot string
}

func openHost(f flags, cfg *agent.Config, log *slog.Logger) (*host, error) {
	if f.simulate == "" {
		b, err := nvml.New(log)
		if err != nil {
			return nil, err
		}
		return &host{backend: b, runner: mps.NewExecRunner(cfg.Host.ControlBinary)}, nil
	}
	log.Warn("SIMULATED HOST: GPUs and MPS are simulated, no real GPU is shared", "profile", f.simulate)
	b, sim, err := nvml.NewSimulated(f.simulate, filepath.Join(cfg.Host.StateDirectory, "simulated-host"), log)
	if err != nil {
		return nil, err
	}
	return &host{backend: b, runner: mps.NewSimRunner(log.With("component", "mps-sim")), sysfsRoot: sim.SysfsRoot(), devRoot: sim.DevRoot()}, nil
}

func serve(ctx context.Context, f flags) error {
	log, err := logging.FromEnv(os.Stderr, f.logLevel, os.Getenv)
	if err != nil {
		return err
	}
	cfg, err := agent.LoadConfig(f.config)
	if err != nil {
		return err
	}
	h, err := openHost(f, cfg, log)
	if err != nil {
		return err
	}
	defer h.backend.Close()
	token, err := cfg.Host.TokenValue()
	if err != nil {
		return err
	}
	inv := client.New(client.Options{URL: cfg.Host.InventoryURL, Token: token, Timeout: cfg.Host.InventoryTimeout, Log: log.With("component", "inventory")})
	a, err := agent.New(agent.Options{
		Config: cfg, Backend: h.backend, Runner: h.runner, Inventory: inv,
		SysfsRoot: h.sysfsRoot, DevRoot: h.devRoot, Simulated: f.simulate != "", Log: log,
	})
	if err != nil {
		return err
	}
	log.Info("starting", "config", f.config, "inventory", cfg.Host.InventoryURL, "listen", cfg.Host.ListenAddress)
	return a.Run(ctx)
}

func checkConfig(ctx context.Context, f flags) error {
	log, err := logging.FromEnv(os.Stderr, f.logLevel, os.Getenv)
	if err != nil {
		return err
	}
	cfg, err := agent.LoadConfig(f.config)
	if err != nil {
		return err
	}
	h, err := openHost(f, cfg, log)
	if err != nil {
		return err
	}
	defer h.backend.Close()
	return agent.CheckConfig(ctx, cfg, h.backend, h.sysfsRoot, h.devRoot, os.Stdout)
}
