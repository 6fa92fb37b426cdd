package agent

import (
	"context"

	"yunion.io/x/mps-daemon/pkg/mps"
)

// probe looks at every GPU's control daemon and servers, read-only and each
// call under the control timeout, and reports whether anything differs from
// the last reconcile's verdict: a daemon that died (kill -9, OOM killer), a
// server that went into FAULT, or one that recovered. The caller then runs a
// full reconcile, which restarts what died, re-applies limits and updates the
// devices' health in the inventory: one code path for every repair.
func (a *Agent) probe(ctx context.Context) (changed bool) {
	for uuid, gs := range a.gpus {
		healthy, reason := a.observe(ctx, gs)
		if healthy != gs.healthy {
			a.log.Info("GPU health changed", "gpu", uuid, "healthy", healthy, "reason", reason)
			changed = true
		}
	}
	return changed
}

// observe is the health of one GPU as its control daemon reports it now.
func (a *Agent) observe(ctx context.Context, gs *gpuState) (bool, string) {
	up, err := gs.ctl.Running(ctx)
	if err != nil {
		return false, "MPS control daemon does not answer: " + err.Error()
	}
	if !up {
		return false, "MPS control daemon is not running"
	}
	servers, err := gs.ctl.Servers(ctx)
	if err != nil {
		return false, "listing MPS servers: " + err.Error()
	}
	for _, pid := range servers {
		st, err := gs.ctl.ServerStatus(ctx, pid)
		if err != nil {
			return false, err.Error()
		}
		if st != mps.ServerActive {
			return false, "MPS server in " + string(st)
		}
	}
	return true, ""
}
