package agent

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
)

// The accounting loop (issue 39). The accounting runs in a goroutine of
// its own, the only one that touches the Accountant: its three passes run
// there one after the other, so a termination one decides cannot race
// another's:
//
//   - a client as it connects: each control daemon's control.log is
//     followed (mps.ClientLog), and every NEW CLIENT line has its client
//     checked at once (accounting.Accountant.Connected), 100 ms or more
//     before its first allocation can be granted;
//   - a poll of the GPUs that have clients, every ClientPollInterval:
//     one NVML call per GPU (its MPS clients and their memory), so a
//     device pushed over its cap in a way no environment shows is caught
//     within that interval. A GPU has clients while the last poll listed
//     some, or a client connected since; an idle GPU is not polled at
//     all. A GPU whose control.log cannot be followed is polled idle too:
//     its new clients are found that way instead;
//   - a pass over every GPU on each health tick, as before.
//
// The main loop hands it a snapshot of the reconcile's state after each
// reconcile and asks for the health tick's pass, never waiting for it
// (publishAccounting). The loop's own steps run under the same deadlines
// as the main loop's, with a heartbeat of their own that the watchdog
// reads (loop.go).

// DefaultClientPollInterval is how often the GPUs that have clients are
// polled. One poll of a GPU is one NVML call: 6 us on an idle H200, 42 us
// with two clients (docs/gpu-runs/mps-probe-escape.txt).
const DefaultClientPollInterval = 100 * time.Millisecond

// acctStopWait bounds how long Run waits for the accounting loop to end.
const acctStopWait = 5 * time.Second

// acctLoop is how the main loop reaches the accounting loop.
type acctLoop struct {
	// inputs holds the latest snapshot, not yet taken; tick a pending
	// request for the health tick's pass. Both have room for one: the
	// main loop replaces a snapshot not taken yet, and never blocks.
	inputs chan acctInputs
	tick   chan struct{}
	beat   heartbeat
}

func newAcctLoop() *acctLoop {
	return &acctLoop{inputs: make(chan acctInputs, 1), tick: make(chan struct{}, 1)}
}

// publishAccounting hands the accounting loop the reconcile's state, and
// with tick asks for a pass over every GPU. It runs in the main loop, the
// only sender, so emptying the slot and filling it never blocks.
func (a *Agent) publishAccounting(tick bool) {
	in := a.accountInputs()
	select {
	case <-a.al.inputs:
	default:
	}
	a.al.inputs <- in
	if tick {
		select {
		case a.al.tick <- struct{}{}:
		default: // one is pending already
		}
	}
}

// logBatch is what one control.log's follower read: clients connecting,
// and commands another program sent (foreign.go).
type logBatch struct {
	path    string
	lines   []mps.NewClient
	foreign []mps.Command
}

// runAccounting is the accounting loop; it returns when ctx ends, its
// followers stopped.
func (a *Agent) runAccounting(ctx context.Context) {
	batches := make(chan logBatch, 64)
	changed := make(chan struct{}, 1) // a log started or stopped being followed
	logs := &clientLogs{log: a.log, guard: a.guard, out: batches, changed: changed, running: map[string]*followedLog{}}
	defer logs.stop()
	every := a.opts.ClientPollInterval
	if every <= 0 {
		every = DefaultClientPollInterval
	}
	var in *acctInputs
	active := map[gpu.UUID]bool{} // GPUs with clients
	// lastPoll is what the last poll of each GPU listed since the last
	// pass over every GPU or client check (which forget it).
	lastPoll := map[gpu.UUID][]gpu.Process{}
	poll := time.NewTimer(time.Hour)
	poll.Stop()
	defer poll.Stop()
	armed := false
	full := func() {
		clear(lastPoll)
		a.acctStep(ctx, "accounting", func(ctx context.Context) {
			procs := a.accountWith(ctx, *in, nil)
			clear(active)
			for g, ps := range procs {
				active[g] = len(ps) > 0
			}
		})
	}
	for {
		select {
		case <-ctx.Done():
			return
		case x := <-a.al.inputs:
			first := in == nil
			in = &x
			if in.policy == config.AccountingOff {
				logs.set(ctx, nil)
			} else {
				logs.set(ctx, in.logs)
			}
			if first {
				full() // the clients connected before this process started
			}
		case <-a.al.tick:
			if in != nil {
				full()
			}
		case b := <-batches:
			if in == nil {
				continue
			}
			clear(lastPoll)
			a.acctStep(ctx, "accounting: clients connecting", func(ctx context.Context) {
				for more := true; more; {
					a.undoForeign(ctx, *in, b.path, b.foreign)
					if len(b.lines) > 0 {
						a.checkConnected(ctx, *in, b.path, b.lines)
						for _, g := range in.logs[b.path] {
							active[g] = true // polled from now on, its memory watched
						}
					}
					select {
					case b = <-batches:
					default:
						more = false
					}
				}
			})
		case <-changed:
			// Said in the status below; a GPU whose log is not followed
			// is polled from now on.
		case <-poll.C:
			armed = false
			if in == nil {
				continue
			}
			if gpus := polled(*in, active, logs.states()); len(gpus) > 0 {
				a.acctStep(ctx, "accounting: poll", func(ctx context.Context) {
					procs := a.sample(ctx, gpus)
					// The same clients with the same memory as the last
					// poll, and no termination to move on: the pass would
					// find what the last one found.
					if !samePolled(lastPoll, procs, gpus) || a.acct.Terminating() > 0 {
						a.accountSampled(ctx, *in, gpus, procs)
					}
					for _, g := range gpus {
						if ps, listed := procs[g]; listed {
							active[g] = len(ps) > 0
							lastPoll[g] = ps
						} else {
							delete(lastPoll, g) // a GPU NVML could not list stays as it was
						}
					}
				})
			}
		}
		if in == nil {
			continue
		}
		states := logs.states()
		var gpus []gpu.UUID
		if in.policy != config.AccountingOff {
			gpus = polled(*in, active, states)
		}
		a.noteClientLogs(logs.wanted, states, gpus, every.Seconds())
		if len(gpus) > 0 && !armed {
			poll.Reset(every)
			armed = true
		}
	}
}

// samePolled reports whether procs lists, for every GPU of gpus, what
// last listed: the same clients with the same memory.
func samePolled(last, procs map[gpu.UUID][]gpu.Process, gpus []gpu.UUID) bool {
	for _, g := range gpus {
		old, ok := last[g]
		cur, listed := procs[g]
		if !ok || !listed || !slices.Equal(old, cur) {
			return false
		}
	}
	return true
}

// polled are the GPUs of in a poll looks at: those with clients, and
// those whose control.log is not followed.
func polled(in acctInputs, active map[gpu.UUID]bool, states map[string]mps.ClientLogState) []gpu.UUID {
	var out []gpu.UUID
	for _, g := range in.uuids {
		if active[g] {
			out = append(out, g)
		}
	}
	for path, gpus := range in.logs {
		if s, ok := states[path]; ok && s.Following {
			continue
		}
		for _, g := range gpus {
			if !slices.Contains(out, g) {
				out = append(out, g)
			}
		}
	}
	slices.Sort(out)
	return out
}

// acctStep runs one step of the accounting loop under the main loop's
// deadline, its heartbeat saying so.
func (a *Agent) acctStep(ctx context.Context, name string, f func(context.Context)) {
	a.al.beat.enter(name)
	defer a.al.beat.leave()
	ctx, cancel := context.WithTimeout(ctx, stepBudget(a.config().Host))
	defer cancel()
	f(ctx)
}

// clientLogs runs one follower per control.log. It is used from the
// accounting loop alone.
type clientLogs struct {
	log     *slog.Logger
	guard   *mps.Guard
	out     chan<- logBatch
	changed chan struct{}
	running map[string]*followedLog
	// wanted are the logs to follow, with their GPUs.
	wanted map[string][]gpu.UUID
	wg     sync.WaitGroup
}

type followedLog struct {
	cl     *mps.ClientLog
	cancel context.CancelFunc
}

// set follows the logs of want and no others.
func (c *clientLogs) set(ctx context.Context, want map[string][]gpu.UUID) {
	c.wanted = want
	for path, f := range c.running {
		if _, ok := want[path]; !ok {
			f.cancel()
			delete(c.running, path)
		}
	}
	for _, path := range slices.Sorted(maps.Keys(want)) {
		if _, ok := c.running[path]; ok {
			continue
		}
		fctx, cancel := context.WithCancel(ctx)
		f := &followedLog{cl: mps.NewClientLog(path, c.log.With("component", "accounting")), cancel: cancel}
		f.cl.Watch(c.guard)
		f.cl.OnChange(func() {
			select {
			case c.changed <- struct{}{}:
			default: // one is pending already
			}
		})
		c.running[path] = f
		c.wg.Go(func() {
			f.cl.Follow(fctx, func(ctx context.Context, l mps.Lines) error {
				select {
				case c.out <- logBatch{path: path, lines: l.Clients, foreign: l.Foreign}:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
		})
	}
}

// states are how the followers fare, by path.
func (c *clientLogs) states() map[string]mps.ClientLogState {
	out := make(map[string]mps.ClientLogState, len(c.running))
	for path, f := range c.running {
		out[path] = f.cl.State()
	}
	return out
}

// stop ends every follower and waits for them.
func (c *clientLogs) stop() {
	for _, f := range c.running {
		f.cancel()
	}
	c.wg.Wait()
}
