package agent

import (
	"context"
	"errors"
	"slices"

	"yunion.io/x/mps-daemon/pkg/mps"
)

// probe looks at every GPU's control daemon and servers, read-only and each
// call under the control timeout, and reports whether anything differs from
// the last reconcile's verdict: a daemon that died (kill -9, OOM killer), a
// server that went into FAULT, or one that recovered. Such a GPU is marked
// for the reconcile the caller runs next, which prepares it again (restarts
// what died, re-applies limits) and updates its devices' health in the
// inventory: one code path for every repair.
//
// A control daemon is asked once per probe: in the single layout every GPU
// shares the one in the pipe root, and its verdict is each GPU's.
func (m *mpsStation) probe(ctx context.Context) (changed bool) {
	type verdict struct {
		healthy bool
		reason  string
	}
	seen := map[string]verdict{} // by pipe directory
	for uuid, gs := range m.gpus {
		v, ok := seen[gs.env.PipeDir]
		if !ok {
			v.healthy, v.reason = m.observe(ctx, gs)
			seen[gs.env.PipeDir] = v
		}
		healthy, reason := v.healthy, v.reason
		if healthy != gs.healthy {
			m.log.Info("GPU health changed", "gpu", uuid, "healthy", healthy, "reason", reason)
			gs.dirty = true
			changed = true
		}
	}
	return changed
}

// observe is the health of one GPU as its control daemon reports it now.
// The server list is the daemon's sign of life too (Running asks the same
// question), so a healthy idle GPU costs one control command a probe.
func (m *mpsStation) observe(ctx context.Context, gs *gpuState) (bool, string) {
	servers, err := gs.ctl.Servers(ctx)
	switch {
	case errors.Is(err, mps.ErrNoDaemon):
		return false, "MPS control daemon is not running"
	case err != nil:
		return false, "MPS control daemon does not answer: " + err.Error()
	}
	for _, pid := range servers {
		st, clients, err := serverState(ctx, gs, pid)
		if errors.Is(err, errVanished) {
			continue
		}
		if err != nil {
			return false, err.Error()
		}
		if st != mps.ServerActive && len(clients) > 0 {
			return false, "MPS server in " + string(st)
		}
	}
	return true, ""
}

// errVanished: the server was listed, then gone before it answered.
var errVanished = errors.New("MPS server gone")

// serverState is one server's status and clients. A server that left the
// list between the listing and these questions (an idle server shut down:
// by an operator, by another program, by the control daemon itself) is errVanished, no failure: it served no one. A server not
// ACTIVE with no client left is on its way out or already recovered (the
// next client is served, docs/gpu-runs/mps-probe-fault.txt): only one with
// clients makes the GPU unhealthy, which the callers decide.
func serverState(ctx context.Context, gs *gpuState, pid int) (mps.ServerStatus, []int, error) {
	st, err := gs.ctl.ServerStatus(ctx, pid)
	if err != nil {
		if vanished(ctx, gs, pid) {
			return "", nil, errVanished
		}
		return "", nil, err
	}
	clients, err := gs.ctl.Clients(ctx, pid)
	if err != nil {
		if vanished(ctx, gs, pid) {
			return "", nil, errVanished
		}
		return "", nil, err
	}
	return st, clients, nil
}

// vanished reports whether server pid is no longer among the control
// daemon's servers (false when the list cannot be read: then the first
// error stands).
func vanished(ctx context.Context, gs *gpuState, pid int) bool {
	servers, err := gs.ctl.Servers(ctx)
	return err == nil && !slices.Contains(servers, pid)
}
