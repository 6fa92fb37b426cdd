package acctloop

import (
	"context"

	"yunion.io/x/mps-daemon/pkg/mps"
)

// Commands another program sent a control daemon (issue 45). Root in a
// Cloudpods pod reaches the pipe root, and through `control` it may still
// change a running server's limits or stop its clients (the privileged
// socket, which the agent's mps.Guard keeps out of its reach, is needed
// only for the daemon's own settings and quit). The follower of each
// control.log warns of every command changing something that the agent did
// not send, and counts it (mps.ClientLog.Watch, /status, /metrics); here
// the loop puts back the agent's limits on a server whose thread
// percentage or pinned memory such a command changed, with the per-server
// setter the agent's MPS station uses (mps.Controller.SetServerLimits,
// read back), once for every GPU of that control daemon. A client
// terminated or a server shut down cannot be undone: they are reported.

// undoForeign puts back the limits of the servers that cmds, read in the
// control.log at path, changed: each GPU of that log's daemon to the
// limits the agent holds there (Inputs.Limits).
func (l *Loop) undoForeign(ctx context.Context, in Inputs, path string, cmds []mps.Command) {
	done := map[int]bool{}
	for _, c := range cmds {
		if !c.ChangesLimits() || done[c.Server] {
			continue
		}
		done[c.Server] = true
		for _, g := range in.Logs[path] {
			ctl, ok := in.Controls[g]
			if !ok {
				continue
			}
			want := in.Limits[g]
			if err := ctl.SetServerLimits(ctx, c.Server, want); err != nil {
				l.log.Warn("an MPS server's limits another program changed could not be put back", "gpu", g, "server", c.Server, "command", c.Line, "err", err)
				continue
			}
			l.log.Info("an MPS server's limits another program changed are put back", "gpu", g, "server", c.Server, "command", c.Line,
				"memory_limit_mib", int(want.MemoryLimit), "thread_percentage", want.ThreadPercentage)
		}
	}
}
