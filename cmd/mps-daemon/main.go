// Command mps-daemon is the host agent: it shares each configured NVIDIA GPU
// through CUDA MPS and registers the virtual devices with the inventory.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"

	"yunion.io/x/mps-daemon/pkg/agent"
	"yunion.io/x/mps-daemon/pkg/nri"
	"yunion.io/x/mps-daemon/pkg/version"
)

type flags struct {
	config   string
	simulate string
	logLevel string
}

func main() {
	capProcs()
	tightenGC()
	os.Exit(run())
}

// maxProcs is how many OS threads run the daemon's Go code at once unless
// GOMAXPROCS says otherwise. Its work is a main loop, an accounting loop
// and an HTTP server; Go's default (every CPU of the host) would start a
// garbage-collection worker and a heap cache per CPU on a host whose CPUs
// are the tenants' (docs/operations.md, "What the daemon costs").
const maxProcs = 2

// capProcs holds the daemon to maxProcs, unless GOMAXPROCS is set.
func capProcs() {
	if os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) > maxProcs {
		runtime.GOMAXPROCS(maxProcs)
	}
}

// gcPercent is the daemon's GOGC unless the environment sets one: its live
// heap is a few MiB, where Go's default (100, and a 4 MiB floor that scales
// with it) let the heap run to twice that between collections; at 50 an
// idle daemon's resident memory is about 1 MiB less for a collection of
// 2.6 ms of CPU every few seconds more (docs/benchmarks.md, "The daemon's
// own memory").
const gcPercent = 50

// tightenGC sets gcPercent, unless GOGC is set.
func tightenGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
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
	root.PersistentFlags().StringVar(&f.simulate, "simulate", "", "run against a SIMULATED host instead of NVML and nvidia-cuda-mps-control, e.g. 8xH100 (profiles: "+simProfiles()+")")
	root.PersistentFlags().StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	var force bool
	teardown := &cobra.Command{
		Use:   "teardown",
		Short: "Stop every MPS control daemon, remove the devices from the inventory, restore compute modes (run with the service stopped)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return tearDown(cmd.Context(), f, force) },
	}
	teardown.Flags().BoolVar(&force, "force", false, "also tear down GPUs with connected MPS clients, which kills them")
	root.AddCommand(teardown, statusCommand(&f))
	if c := draCommand(&f); c != nil {
		root.AddCommand(c)
	}
	var mode string
	check := &cobra.Command{
		Use:   "check-config",
		Short: "Validate host.conf and the device YAML against the GPUs, print the plan, touch nothing",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return checkConfig(cmd.Context(), f, mode) },
	}
	check.Flags().StringVar(&mode, "mode", string(buildModes[0]), fmt.Sprintf("the mode to validate for, of %v (the first: the mode this build's package runs)", buildModes))
	root.AddCommand(check)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "mps-daemon:", err)
		return 1
	}
	return 0
}

func serve(ctx context.Context, f flags) error {
	w, err := wire(ctx, f, true)
	if err != nil {
		return err
	}
	defer w.backend.Close()
	return runAgent(ctx, f, w.loaded, agent.ModeCloudpods, w.inv, nil, "inventory", w.where, "pipe_layout", w.cfg.Host.Layout(), "listen", w.cfg.Host.ListenAddress)
}

// runAgent runs the agent on l's host in mode, devices where its devices
// go (changed: when they changed there), with its health and metrics
// server, until ctx ends; SIGHUP asks for a reload. what is logged with
// "starting".
func runAgent(ctx context.Context, f flags, l *loaded, mode agent.Mode, devices agent.DeviceBackend, changed <-chan struct{}, what ...any) error {
	cfg, h, log := l.cfg, l.host, l.log
	watchdog, err := agent.WatchdogInterval()
	if err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reload := make(chan struct{}, 1)
	go forward(ctx, hup, reload)
	var plugin *nri.Plugin
	if cfg.Host.NRI && mode == agent.ModeCloudpods {
		plugin = nri.New(cfg.Host.NRISocket, log)
	}
	a, err := agent.New(agent.Options{
		Config: cfg, ConfigPath: f.config, Mode: mode, Backend: h.backend, Runner: h.runner, Devices: devices, Changed: changed,
		SysfsRoot: h.sysfsRoot, DevRoot: h.devRoot, Simulated: f.simulate != "",
		Notifier: agent.Systemd{}, Watchdog: watchdog, Reload: reload, WatchFiles: true, NRI: plugin, Log: log,
	})
	if err != nil {
		return err
	}
	log.Info("starting", append([]any{"version", version.Version, "config", f.config}, what...)...)
	return runServing(ctx, a, cfg.Host, log.With("component", "agent"))
}

func tearDown(ctx context.Context, f flags, force bool) error {
	w, err := wire(ctx, f, false)
	if err != nil {
		return err
	}
	defer w.backend.Close()
	a, err := agent.New(agent.Options{Config: w.cfg, Backend: w.backend, Runner: w.runner, Devices: w.inv,
		SysfsRoot: w.sysfsRoot, DevRoot: w.devRoot, Simulated: f.simulate != "", Log: w.log})
	if err != nil {
		return err
	}
	return a.Teardown(ctx, force, os.Stdout)
}
