package main

import (
	"context"
	"log/slog"
	"os"

	"yunion.io/x/mps-daemon/pkg/agent"
	"yunion.io/x/mps-daemon/pkg/logging"
)

// checkConfig is `mps-daemon check-config`: host.conf and the device YAML
// validated against the GPUs, as the daemon validates them, and the plan
// printed (GPU, N, cap per device). It touches neither MPS nor the
// inventory nor the compute mode.
func checkConfig(ctx context.Context, f flags) error {
	_, cfg, h, err := loadHost(f)
	if err != nil {
		return err
	}
	defer h.backend.Close()
	return agent.CheckConfig(ctx, os.Stdout, cfg, h.backend, h.sysfsRoot, h.devRoot)
}

// loadHost is what check-config and the Kubernetes mode start from: the
// logger, both configuration files, and the host's GPUs (real or
// simulated). The caller closes h.backend.
func loadHost(f flags) (*slog.Logger, *agent.Config, *host, error) {
	log, err := logging.FromEnv(os.Stderr, f.logLevel, os.Getenv)
	if err != nil {
		return nil, nil, nil, err
	}
	cfg, err := agent.LoadConfig(f.config)
	if err != nil {
		return nil, nil, nil, err
	}
	h, err := openHost(f, cfg, log)
	if err != nil {
		return nil, nil, nil, err
	}
	return log, cfg, h, nil
}
