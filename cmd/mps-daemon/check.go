package main

import (
	"context"
	"fmt"
	"os"
	"slices"

	"yunion.io/x/mps-daemon/pkg/agent"
)

// checkConfig is `mps-daemon check-config`: host.conf and the device YAML
// validated against the GPUs, as the daemon validates them in mode, and
// the plan printed (GPU, N, cap per device). It touches neither MPS nor the
// inventory nor the compute mode.
func checkConfig(ctx context.Context, f flags, mode string) error {
	m, err := parseMode(mode)
	if err != nil {
		return err
	}
	l, err := load(ctx, f, m, false)
	if err != nil {
		return err
	}
	defer l.backend.Close()
	return agent.CheckConfig(ctx, os.Stdout, l.cfg, m, l.backend, l.sysfsRoot, l.devRoot)
}

// parseMode is check-config's --mode: one of the modes this build runs
// (buildModes; the Kubernetes mode only in the build with it).
func parseMode(s string) (agent.Mode, error) {
	if m := agent.Mode(s); slices.Contains(buildModes, m) {
		return m, nil
	}
	if agent.Mode(s) == agent.ModeKubernetes {
		return "", fmt.Errorf("--mode %s: this build has no Kubernetes mode (mps-daemon-kubernetes has)", s)
	}
	return "", fmt.Errorf("--mode %q: want one of %v", s, buildModes)
}
