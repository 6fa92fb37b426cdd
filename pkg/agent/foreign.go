package agent

import (
	"context"

	"yunion.io/x/mps-daemon/pkg/mps"
)

// Commands another program sent a control daemon (issue 45). Root in a
// Cloudpods pod reaches the pipe root, and through `control` it may still
// change a running server's limits or stop its clients (the privileged
// socket, which the Guard keeps out of its reach, is needed only for the
// daemon's own settings and quit). The follower of each control.log warns
// of every command changing something that this daemon did not send, and
// counts it (mps.ClientLog.Watch, /status, /metrics); here the accounting
// loop puts back this daemon's limits on a server whose thread percentage
// or pinned memory such a command changed, with the per-server setter the
// MPS stage uses (mps.Controller.SetServerLimits, read back), once for
// every GPU of that control daemon. A client terminated or a server shut
// down cannot be undone: they are reported.

// ownLimits is what a GPU's control daemon holds on its servers, with the
// GPU's control: the main loop's, handed to the accounting loop.
type ownLimits struct {
	ctl  *mps.Controller
	want mps.Limits
}

// undoForeign puts back the limits of the servers that cmds, read in the
// control.log at path, changed.
func (a *Agent) undoForeign(ctx context.Context, in acctInputs, path string, cmds []mps.Command) {
	done := map[int]bool{}
	for _, c := range cmds {
		if !c.ChangesLimits() || done[c.Server] {
			continue
		}
		done[c.Server] = true
		for _, g := range in.logs[path] {
			own, ok := in.own[g]
			if !ok {
				continue
			}
			if err := own.ctl.SetServerLimits(ctx, c.Server, own.want); err != nil {
				a.log.Warn("an MPS server's limits another program changed could not be put back", "gpu", g, "server", c.Server, "command", c.Line, "err", err)
				continue
			}
			a.log.Info("an MPS server's limits another program changed are put back", "gpu", g, "server", c.Server, "command", c.Line,
				"memory_limit_mib", int(own.want.MemoryLimit), "thread_percentage", own.want.ThreadPercentage)
		}
	}
}
