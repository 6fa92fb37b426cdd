package acctloop

import (
	"context"
	"sort"
	"time"

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
//
// A put-back is a few control commands per GPU, each a process; one
// `set_*` line costs its sender one. So that a flood of them cannot keep
// the loop running put-backs (the kills at connect and the polls wait for
// it), the put-backs of one server are spaced by PutBackEvery: a change
// within it is put back when it is up, once however many came.

// DefaultPutBackEvery is the least time between two put-backs of one
// server's limits.
const DefaultPutBackEvery = time.Second

// putBacks are the servers whose limits were put back lately, and those
// changed since, to put back once their time comes.
type putBacks struct {
	every time.Duration
	last  map[serverOf]time.Time
	// pending: the last command read that changed the server's limits.
	pending map[serverOf]mps.Command
}

// serverOf is a server of the control daemon whose control.log is at path.
type serverOf struct {
	path   string
	server int
}

// putBack is a server whose limits are to be put back, and the command
// that changed them.
type putBack struct {
	serverOf
	cmd mps.Command
}

func newPutBacks(every time.Duration) *putBacks {
	return &putBacks{every: every, last: map[serverOf]time.Time{}, pending: map[serverOf]mps.Command{}}
}

// changed takes the commands read in the control.log at path: the servers
// whose limits they changed are pending from now on, each with the last
// such command.
func (p *putBacks) changed(path string, cmds []mps.Command) {
	for _, c := range cmds {
		if c.ChangesLimits() {
			p.pending[serverOf{path, c.Server}] = c
		}
	}
}

// due takes, at now, the pending servers whose last put-back is at least
// every ago, ordered by path and server, and marks them put back at now.
func (p *putBacks) due(now time.Time) []putBack {
	var out []putBack
	for s, c := range p.pending {
		if last, ok := p.last[s]; !ok || now.Sub(last) >= p.every {
			out = append(out, putBack{s, c})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].path != out[j].path {
			return out[i].path < out[j].path
		}
		return out[i].server < out[j].server
	})
	for _, b := range out {
		delete(p.pending, b.serverOf)
		p.last[b.serverOf] = now
	}
	// Forget the servers whose spacing is over, so that the map holds
	// only recent ones.
	for s, last := range p.last {
		if _, waiting := p.pending[s]; !waiting && now.Sub(last) >= p.every {
			delete(p.last, s)
		}
	}
	return out
}

// next is when the first pending server is due (false if none is).
func (p *putBacks) next() (time.Time, bool) {
	var at time.Time
	for s := range p.pending {
		t := p.last[s].Add(p.every)
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	return at, len(p.pending) > 0
}

// undoForeign puts back, at now, the limits of the pending servers whose
// spacing allows it (putBacks.due): each GPU of the server's control
// daemon to the limits the agent holds there (Inputs.Limits). It returns
// when the next of the rest is due (false if none is).
func (l *Loop) undoForeign(ctx context.Context, in Inputs, p *putBacks, now time.Time) (time.Time, bool) {
	for _, b := range p.due(now) {
		for _, g := range in.Logs[b.path] {
			ctl, ok := in.Controls[g]
			if !ok {
				continue
			}
			want := in.Limits[g]
			if err := ctl.SetServerLimits(ctx, b.server, want); err != nil {
				l.log.Warn("an MPS server's limits another program changed could not be put back", "gpu", g, "server", b.server, "command", b.cmd.Line, "err", err)
				continue
			}
			l.log.Info("an MPS server's limits another program changed are put back", "gpu", g, "server", b.server, "command", b.cmd.Line,
				"memory_limit_mib", int(want.MemoryLimit), "thread_percentage", want.ThreadPercentage)
		}
	}
	return p.next()
}
