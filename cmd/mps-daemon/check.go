package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"

	"yunion.io/x/mps-daemon/pkg/agent"
	"yunion.io/x/mps-daemon/pkg/logging"
)

// checkConfig is `mps-daemon check-config`: host.conf and the device YAML
// validated against the GPUs, as the daemon validates them, and the plan
// printed (GPU, N, cap per device). It touches neither MPS nor the
// inventory nor the compute mode.
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
	return writePlan(ctx, os.Stdout, cfg, h)
}

// writePlan checks cfg on host h and writes its plan to w.
func writePlan(ctx context.Context, w io.Writer, cfg *agent.Config, h *host) error {
	p, err := agent.Plan(ctx, cfg, h.backend, h.sysfsRoot, h.devRoot)
	if err != nil {
		return err
	}
	// What the daemon reads at start besides the two files.
	if _, err := cfg.Host.TokenValue(); err != nil {
		return fmt.Errorf("%s: %w", cmp.Or(cfg.Host.Path, "host.conf"), err)
	}
	fmt.Fprintf(w, "host.conf: %s\n", cfg.Host.Path)
	if cfg.Devices != nil {
		fmt.Fprintf(w, "devices:   %s\n", cfg.Devices.Path)
		for _, e := range cfg.Devices.Skipped {
			fmt.Fprintf(w, "skipped:   %s:%d: type %q belongs to another agent\n", cfg.Devices.Path, e.Line, e.Type)
		}
	}
	fmt.Fprintln(w)
	return p.Write(w)
}
