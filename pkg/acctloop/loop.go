// Package acctloop is the accounting's station of the host agent: the loop
// that runs pkg/accounting's passes over the MPS clients of the GPUs with
// enforced caps, the control logs it follows for clients as they connect,
// the devices' use it writes into their views (pkg/view), and its part of
// the daemon's /status (the accounting, each device's use).
//
// The accounting runs in a goroutine of its own (Run), the only one that
// touches the Accountant: its three passes run there one after the other,
// so a termination one decides cannot race another's:
//
//   - a client as it connects: each control daemon's control.log is
//     followed (mps.ClientLog), and every NEW CLIENT line has its client
//     checked at once (accounting.Accountant.Connected), 100 ms or more
//     before its first allocation can be granted; one to be killed is
//     killed once the server.log beside says its context is up
//     (accounting.Accountant.Activated), never while it connects; a
//     command another program sent that changed a server's limits has
//     them put back at once, at most once a second for a server (foreign.go);
//   - a poll of the GPUs that have clients, every PollInterval: one NVML
//     call per GPU (its MPS clients and their memory), so a device pushed
//     over its cap in a way no environment shows is caught within that
//     interval. A GPU has clients while the last poll listed some, or a
//     client connected since, and stays polled while a termination is
//     under way; an idle GPU is not polled at all. A GPU
//     whose control.log cannot be followed is polled idle too: its new
//     clients are found that way instead;
//   - a pass over every GPU on each health tick.
//
// The processes of a Cloudpods pod are billed together, to what the pod's
// server holds of their GPU (pods.go).
//
// The agent's main loop hands it a snapshot of the reconcile's state
// (Inputs) after each reconcile and asks for the health tick's pass,
// never waiting for it (Publish). Each step of the loop runs under the
// deadline the agent gives it (Options.Step), with a heartbeat of its own
// that the agent's watchdog reads.
package acctloop

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/vdev"
	"yunion.io/x/mps-daemon/pkg/view"
)

// DefaultPollInterval is how often the GPUs that have clients are polled.
// One poll of a GPU is one NVML call: 6 us on an idle H200, 42 us with two
// clients (docs/gpu-runs/mps-probe-escape.txt).
const DefaultPollInterval = 100 * time.Millisecond

// Metrics counts what the passes did: pkg/metrics' Daemon.
type Metrics interface {
	ObserveEnforcementStep(step, cause string)
	ObserveEscape(cause, detected string, lasted time.Duration)
}

// Options wire a Loop.
type Options struct {
	// Accountant is the accounting's state; the Loop alone uses it.
	Accountant *accounting.Accountant
	// GPUs lists each GPU's MPS clients (NVML).
	GPUs accounting.Lister
	// Views are the devices' views, whose use each pass writes.
	Views *view.Writer
	// Guard is the agent's guard of its control daemons: the commands it
	// sent, which the followers of the control logs tell from another
	// program's (mps.ClientLog.Watch); nil tells none.
	Guard *mps.Guard
	// Metrics counts the enforcement steps and escapes; nil counts none.
	Metrics Metrics
	// Step runs one step of the loop under its deadline (the agent's, with
	// a heartbeat its watchdog reads); nil runs it as it is.
	Step func(ctx context.Context, name string, f func(context.Context))
	// PollInterval is how often the GPUs that have clients are polled; 0
	// is DefaultPollInterval.
	PollInterval time.Duration
	// PutBackEvery is the least time between two put-backs of the limits
	// of one server another program changed (foreign.go); 0 is
	// DefaultPutBackEvery.
	PutBackEvery time.Duration
	Log          *slog.Logger
}

// Inputs is what the accounting needs of the reconcile: a snapshot the
// agent's main loop (which owns the plan and the GPUs' state) hands to the
// Loop, read by no one else afterwards.
type Inputs struct {
	Policy config.AccountingPolicy
	// GPUs are the GPUs with enforced caps, sorted; Devices their planned
	// devices; Limits what each GPU's control daemon holds, as the agent
	// set and read them back.
	GPUs    []gpu.UUID
	Devices []vdev.Device
	Limits  map[gpu.UUID]mps.Limits
	// Controls are the GPUs' MPS controls, by UUID.
	Controls map[gpu.UUID]Control
	// Single: one control daemon serves every GPU (the single pipe
	// layout), whose pipe directory reaches containers by other ways than
	// the CDI edits; in the per-GPU layout only the edits, which always
	// carry the identity file, do.
	Single bool
	// Logs are the control daemons' control.log files, each with the GPUs
	// its daemon serves (one in the per-GPU layout, all in the single).
	Logs map[string][]gpu.UUID
	// Claims are the Kubernetes claims' own devices as the backend last
	// answered; nil without.
	Claims []vdev.Device
	// ViewGiven: containers get the view (the last CDI write gave it), so
	// a client without the view's library in its memory map sees the
	// whole GPU, and is reported.
	ViewGiven bool
	// ViewConfigured: mps_view_library is set, so each pass writes the
	// devices' use into their views.
	ViewConfigured bool
	// Held are the devices a holder keeps, as the backend last answered,
	// while Cloudpods' pods are looked for (mps_pod_cgroup_parent set;
	// nil otherwise): a pod's cap on a GPU is what its server holds there,
	// summed (pods.go).
	Held []Held
	// pods are Held by pod, as the accounting bills them (Inputs.settle).
	pods map[string]podHolding
}

// Control is a GPU's MPS control as the accounting uses it: its clients
// terminated (accounting.Terminator) and the limits of a server another
// program changed put back (foreign.go); an mps.Controller.
type Control interface {
	accounting.Terminator
	SetServerLimits(ctx context.Context, server int, l mps.Limits) error
}

// terms are in's controls as the accounting terminates clients through
// them.
func (in Inputs) terms() map[gpu.UUID]accounting.Terminator {
	out := make(map[gpu.UUID]accounting.Terminator, len(in.Controls))
	for g, c := range in.Controls {
		out[g] = c
	}
	return out
}

// settle derives what the passes read of in from its fields: the pods'
// holdings.
func (in *Inputs) settle() { in.pods = in.podHoldings() }

// Loop is the accounting's station.
type Loop struct {
	opts Options
	acct *accounting.Accountant
	log  *slog.Logger
	// inputs holds the latest snapshot, not yet taken; tick a pending
	// request for the health tick's pass. Both have room for one: the
	// main loop replaces a snapshot not taken yet, and never blocks.
	inputs chan Inputs
	tick   chan struct{}
	// viewUsedErr (the loop's) is the last failure to write the use into
	// the views, logged when it changes.
	viewUsedErr string

	// mu guards the station's part of the status (status.go).
	mu sync.Mutex
	st statusPart
}

// New builds a Loop; it starts nothing.
func New(o Options) *Loop {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.PutBackEvery <= 0 {
		o.PutBackEvery = DefaultPutBackEvery
	}
	if o.Step == nil {
		o.Step = func(ctx context.Context, _ string, f func(context.Context)) { f(ctx) }
	}
	return &Loop{opts: o, acct: o.Accountant, log: o.Log, inputs: make(chan Inputs, 1), tick: make(chan struct{}, 1)}
}

// Publish hands the loop the reconcile's state, and with tick asks for a
// pass over every GPU. The agent's main loop is the only sender, so
// emptying the slot and filling it never blocks.
func (l *Loop) Publish(in Inputs, tick bool) {
	in.settle()
	select {
	case <-l.inputs:
	default:
	}
	l.inputs <- in
	if tick {
		select {
		case l.tick <- struct{}{}:
		default: // one is pending already
		}
	}
}

// logBatch is what one control.log's follower read: clients connecting,
// clients whose context is up (server.log), and commands another program
// sent (foreign.go).
type logBatch struct {
	path    string
	lines   []mps.NewClient
	active  []mps.ActiveClient
	foreign []mps.Command
}

// Run is the accounting loop; it returns when ctx ends, its followers
// stopped.
func (l *Loop) Run(ctx context.Context) {
	batches := make(chan logBatch, 64)
	changed := make(chan struct{}, 1) // a log started or stopped being followed
	logs := &clientLogs{log: l.log, guard: l.opts.Guard, out: batches, changed: changed, running: map[string]*followedLog{}}
	defer logs.stop()
	every := l.opts.PollInterval
	var in *Inputs
	active := map[gpu.UUID]bool{} // GPUs with clients
	// lastPoll is what the last poll of each GPU listed since the last
	// pass over every GPU or client check (which forget it).
	lastPoll := map[gpu.UUID][]gpu.Process{}
	poll := time.NewTimer(time.Hour)
	poll.Stop()
	defer poll.Stop()
	armed := false
	// The put-backs of servers another program changed, and when the
	// next one spaced out is due (foreign.go).
	backs := newPutBacks(l.opts.PutBackEvery)
	later := time.NewTimer(time.Hour)
	later.Stop()
	defer later.Stop()
	putBackLater := func(at time.Time, pending bool) {
		if pending {
			later.Reset(time.Until(at))
		}
	}
	full := func() {
		clear(lastPoll)
		l.opts.Step(ctx, "accounting", func(ctx context.Context) {
			procs := l.pass(ctx, *in, nil)
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
		case x := <-l.inputs:
			first := in == nil
			in = &x
			if in.Policy == config.AccountingOff {
				logs.set(ctx, nil)
			} else {
				logs.set(ctx, in.Logs)
			}
			if first {
				full() // the clients connected before this process started
			}
		case <-l.tick:
			if in != nil {
				full()
			}
		case b := <-batches:
			if in == nil {
				continue
			}
			clear(lastPoll)
			l.opts.Step(ctx, "accounting: clients connecting", func(ctx context.Context) {
				for more := true; more; {
					if len(b.lines) > 0 {
						l.checkConnected(ctx, *in, b.path, b.lines)
						for _, g := range in.Logs[b.path] {
							active[g] = true // polled from now on, its memory watched
						}
					}
					l.activated(ctx, *in, b.path, b.active)
					backs.changed(b.path, b.foreign)
					select {
					case b = <-batches:
					default:
						more = false
					}
				}
				// After the clients: a put-back is a few control
				// commands per GPU, which another program's commands
				// must not put before a kill at connect.
				putBackLater(l.undoForeign(ctx, *in, backs, time.Now()))
			})
		case <-later.C:
			if in == nil {
				continue
			}
			l.opts.Step(ctx, "accounting: put-backs", func(ctx context.Context) {
				putBackLater(l.undoForeign(ctx, *in, backs, time.Now()))
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
				l.opts.Step(ctx, "accounting: poll", func(ctx context.Context) {
					procs := l.sample(ctx, gpus)
					// The same clients with the same memory as the last
					// poll, and no termination to move on: the pass would
					// find what the last one found.
					if !samePolled(lastPoll, procs, gpus) || l.acct.Terminating() > 0 {
						l.passSampled(ctx, *in, gpus, procs)
					}
					// A termination under way keeps the GPUs polled: its
					// next step (the kill at ActiveWait of a client caught
					// as it connected, the next signal once a grace is
					// up) is taken by a pass, and a client whose context
					// is not up is not listed by NVML.
					terminating := l.acct.Terminating() > 0
					for _, g := range gpus {
						if ps, listed := procs[g]; listed {
							active[g] = len(ps) > 0 || terminating
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
		if in.Policy != config.AccountingOff {
			gpus = polled(*in, active, states)
		}
		l.noteClientLogs(logs.wanted, states, gpus, every.Seconds())
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
func polled(in Inputs, active map[gpu.UUID]bool, states map[string]mps.ClientLogState) []gpu.UUID {
	var out []gpu.UUID
	for _, g := range in.GPUs {
		if active[g] {
			out = append(out, g)
		}
	}
	for path, gpus := range in.Logs {
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

// Status fills the accounting's part of st: the accounting (the policy,
// the clients, the terminations), each device's and claim's use, and
// Cloudpods' pods; st's GPUs are filled already (the pods' GPU index).
func (l *Loop) Status(st *status.Status) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st.fill(st)
}
