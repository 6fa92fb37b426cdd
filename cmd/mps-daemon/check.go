package main

import (
	"context"
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
	return agent.CheckConfig(ctx, os.Stdout, cfg, h.backend, h.sysfsRoot, h.devRoot)
}
