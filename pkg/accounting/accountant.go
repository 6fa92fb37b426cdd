package accounting

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/identity"
	"yunion.io/x/mps-daemon/pkg/units"
)

// Options wires an Accountant.
type Options struct {
	// ProcRoot, Identities and Pods make its Mapper (see Mapper).
	ProcRoot   string
	Identities func() (identity.Table, error)
	Pods       PodFinder
	// Grace, ActiveWait, Killer and Now go to its Enforcer (see
	// EnforcerOptions).
	Grace      time.Duration
	ActiveWait time.Duration
	Killer     Killer
	Now        func() time.Time
	// Uptime is how long the host has been up (CLOCK_BOOTTIME), which a
	// process's start time in /proc counts from; nil reads the clock.
	Uptime func() time.Duration
	Log    *slog.Logger
}

// Accountant is accounting for one agent: it keeps what one tick needs of
// the last (the previous sample, the terminations under way, what was
// already reported) and runs Account, Decide and the Enforcer in order. It
// is used from one goroutine.
type Accountant struct {
	mapper *Mapper
	enf    *Enforcer
	log    *slog.Logger
	prev   *Usage
	policy config.AccountingPolicy
	// over and reported are what was last logged, so a state is logged
	// when it starts (and, for over, ends), not every tick.
	over     map[string]bool
	reported reportKeys
	// refreshErr is the last failure to read the identity files or the
	// host's mount namespace, logged when it changes.
	refreshErr string
	// identityOptional: containers may reach MPS without an identity file
	// (SetIdentityRequired).
	identityOptional bool
	// serverMemory is, by GPU, the pinned memory limit a client gets
	// without a list of its own (SetServerMemoryLimits).
	serverMemory map[gpu.UUID]units.MiB
	// viewLibrary is the view's library file name, "" when containers
	// get no view (SetViewLibrary); views what each client's map showed.
	viewLibrary string
	views       map[procKey]bool
	now         func() time.Time
	uptime      func() time.Duration
	// overSince and underAt are, by device, when a sample first saw it
	// over its cap (while it stays over) and last saw it under: where an
	// escape over the cap began (EscapeTime).
	overSince, underAt map[string]time.Time
	// seen are the clients checked as they connected (Connected), by PID.
	seen map[int]seenClient
	// known are the clients the last passes looked up, by PID: a poll
	// takes a client's identity from here while its start time is the
	// same (knownLookup), a tick looks every client up afresh.
	known map[int]knownClient
}

// knownClient is what a lookup said of a client of a GPU.
type knownClient struct {
	gpu gpu.UUID
	id  Identity
	err error
}

// SetServerMemoryLimits says, by GPU, the pinned memory limit MPS holds a
// client of ours to when its environment has no CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
// of its own: its control daemon's default for the client's ordinal 0 (0
// for none). Where that is above a device's cap (a GPU shared by claims
// of any size, whose daemon holds the whole GPU; the single layout's
// ordinal 0, which holds the largest cap of any GPU), dropping or raising
// the variable escapes the device's limit (CheckMemoryLimit). A GPU left
// out is checked only for lists MPS cannot take.
func (a *Accountant) SetServerMemoryLimits(m map[gpu.UUID]units.MiB) { a.serverMemory = m }

// SetIdentityRequired says whether every container that reaches MPS was
// given an identity file (true, the default: the per-GPU layout, where only
// the CDI edits give a container a GPU's pipe directory), so that a
// container client whose device cannot be established has hidden it and is
// terminated under enforce. With the single pipe layout, Cloudpods' own
// host agent gives its pods the pipe root without one: such clients are
// then reported, never terminated.
func (a *Accountant) SetIdentityRequired(required bool) { a.identityOptional = !required }

// reportKey is what makes an unknown, mismatched or escaping client the
// same one from tick to tick: a change in any field is logged anew. kind
// keeps the three apart.
type reportKey struct {
	kind                        string
	gpu                         gpu.UUID
	pid                         int
	start                       uint64
	device, env, source, reason string
}

// reportKeys are what logChanges last logged; a pass that sampled some
// GPUs only keeps the others' as they were.
type reportKeys map[reportKey]bool

// Report is one tick's outcome: the numbers for metrics and status, the
// devices over their cap, and what was done.
type Report struct {
	Policy   config.AccountingPolicy
	Usage    Usage
	Decision Decision
	Steps    []Step
}

// New builds an Accountant.
func New(o Options) *Accountant {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "accounting")
	m := &Mapper{ProcRoot: o.ProcRoot, Identities: o.Identities, Pods: o.Pods}
	// NewEnforcer fails only without Procs, which is set here.
	enf, _ := NewEnforcer(EnforcerOptions{Grace: o.Grace, ActiveWait: o.ActiveWait, Killer: o.Killer, Procs: m, Now: o.Now, Log: log})
	a := &Accountant{mapper: m, enf: enf, log: log, over: map[string]bool{}, reported: reportKeys{},
		now: o.Now, uptime: o.Uptime, overSince: map[string]time.Time{}, underAt: map[string]time.Time{}, seen: map[int]seenClient{},
		known: map[int]knownClient{}}
	if a.now == nil {
		a.now = time.Now
	}
	if a.uptime == nil {
		a.uptime = bootClock
	}
	return a
}

// bootClock is CLOCK_BOOTTIME: how long the host has been up, suspend
// included, as /proc's process start times count it.
func bootClock() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's start time: 100
// on every architecture Linux runs this daemon on.
const clockTicks = 100

// startTime is when a process started ticks clock ticks after boot; zero
// when not known.
func (a *Accountant) startTime(ticks uint64) time.Time {
	up := a.uptime()
	if ticks == 0 || up == 0 {
		return time.Time{}
	}
	return a.now().Add(time.Duration(ticks)*(time.Second/clockTicks) - up)
}

// Tick accounts one sample. procs is Sample's answer (GPU UUID -> MPS
// clients; a GPU left out is not measured), caps the host's devices and
// their caps (Caps), qos the batch devices whose clients' environment is
// checked (BatchQoS; nil checks none), terms each GPU's MPS control by UUID
// (used under enforce only). Under off it only forgets: the previous sample and any
// termination under way, so turning enforce on later starts afresh. The
// caller skips NVML's listing under off and passes nil procs.
func (a *Accountant) Tick(ctx context.Context, p config.AccountingPolicy, procs map[gpu.UUID][]gpu.Process, caps map[string]uint64, qos map[string]DeviceQoS, terms map[gpu.UUID]Terminator) Report {
	return a.pass(ctx, DetectedTick, p, procs, caps, qos, terms)
}

// Poll is Tick over the GPUs that have clients only (procs holds those):
// the others keep what the last pass that sampled them found.
func (a *Accountant) Poll(ctx context.Context, p config.AccountingPolicy, procs map[gpu.UUID][]gpu.Process, caps map[string]uint64, qos map[string]DeviceQoS, terms map[gpu.UUID]Terminator) Report {
	return a.pass(ctx, DetectedPoll, p, procs, caps, qos, terms)
}

// setPolicy takes the policy of a pass; false when it accounts nothing
// (off), every state forgotten.
func (a *Accountant) setPolicy(ctx context.Context, p config.AccountingPolicy) bool {
	if p != a.policy {
		if a.policy == config.AccountingEnforce {
			a.enf.Reset(ctx)
		}
		if a.policy != "" {
			a.log.Info("accounting policy changed", "from", string(a.policy), "to", string(p))
		}
		a.policy = p
	}
	if p != config.AccountingReport && p != config.AccountingEnforce {
		a.prev = nil
		clear(a.over)
		clear(a.reported)
		clear(a.overSince)
		clear(a.underAt)
		clear(a.seen)
		clear(a.known)
		return false
	}
	return true
}

func (a *Accountant) pass(ctx context.Context, detected string, p config.AccountingPolicy, procs map[gpu.UUID][]gpu.Process, caps map[string]uint64, qos map[string]DeviceQoS, terms map[gpu.UUID]Terminator) Report {
	r := Report{Policy: p}
	if !a.setPolicy(ctx, p) {
		return r
	}
	at := a.now()
	r.Usage = Account(procs, caps, a.lookupFor(ctx, detected, caps))
	a.hiddenOptional(&r.Usage)
	r.Usage.Escapes = Escapes(r.Usage, caps, qos, a.serverMemory)
	a.checkViews(&r.Usage)
	h := History{Previous: a.prev, Terminating: a.enf.Terminating()}
	r.Decision = Decide(r.Usage, caps, p, h)
	a.crossings(r.Usage, r.Decision, caps, at)
	r.Decision.Actions = append(r.Decision.Actions, DecideEscapes(r.Usage.Escapes, r.Usage, caps, p, h, r.Decision.Actions)...)
	r.Decision.Actions = append(r.Decision.Actions, DecideHidden(r.Usage, p, h, r.Decision.Actions)...)
	for i := range r.Decision.Actions {
		a.annotate(&r.Decision.Actions[i], detected)
	}
	a.logChanges(ctx, r, procs)
	if p == config.AccountingEnforce {
		r.Steps = a.enf.Run(ctx, r.Usage, r.Decision.Actions, terms)
	}
	a.prev = mergeUsage(a.prev, r.Usage)
	a.forgetSeen(at)
	return r
}

// lookupFor is how a pass finds its clients' devices: a tick re-reads the
// host's identity files and looks every client up (and forgets the ones
// it did not list); a poll, ten times a second while a GPU has clients,
// takes a client it knows from the last pass as it was while its start
// time is the same (a few microseconds of /proc against a lookup's 15 or
// more, docs/benchmarks.md), and re-reads the identity files only for a
// client it does not know. What a process is billed to cannot change while
// it lives; what it shows of itself can, and the tick sees that.
func (a *Accountant) lookupFor(ctx context.Context, detected string, caps map[string]uint64) LookupFunc {
	refreshed := false
	fresh := func(pid int, g gpu.UUID) (Identity, error) {
		if !refreshed {
			a.refresh(ctx)
			refreshed = true
		}
		id, err := a.lookup(pid, g, caps)
		a.known[pid] = knownClient{gpu: g, id: id, err: err}
		return id, err
	}
	if detected != DetectedPoll {
		clear(a.known)
		return fresh
	}
	return func(pid int, g gpu.UUID) (Identity, error) {
		if k, ok := a.known[pid]; ok && k.gpu == g && k.id.StartTicks != 0 {
			if start, err := a.mapper.StartTicks(pid); err == nil && start == k.id.StartTicks {
				return k.id, k.err
			}
		}
		return fresh(pid, g)
	}
}

// lookup is the Mapper's lookup of pid on GPU g, a client in a Cloudpods
// pod billed to its server's pod there among caps (pods.go).
func (a *Accountant) lookup(pid int, g gpu.UUID, caps map[string]uint64) (Identity, error) {
	id, err := a.mapper.Lookup(pid, g)
	if err == nil && id.Source == SourcePod {
		id.Device, err = podDevice(g, id.Pod, caps)
	}
	return id, err
}

// Terminating says how many clients are being terminated: a pass must run
// to take their next steps when their grace ends.
func (a *Accountant) Terminating() int { return len(a.enf.pending) }

// hiddenOptional: with the single pipe layout, a container client without
// a device is reported, never terminated (SetIdentityRequired).
func (a *Accountant) hiddenOptional(u *Usage) {
	if !a.identityOptional {
		return
	}
	for i, un := range u.Unknown {
		if un.Hidden {
			u.Unknown[i].Hidden = false
			u.Unknown[i].Reason = un.Reason + "; with the single pipe layout containers may reach MPS without an identity file: reported, never terminated"
		}
	}
}

// crossings notes, for each device measured at, whether it is over its
// cap (since when) or under; devices the host no longer has are forgotten.
func (a *Accountant) crossings(u Usage, d Decision, caps map[string]uint64, at time.Time) {
	over := map[string]bool{}
	for _, o := range d.Over {
		over[o.Device] = true
	}
	for name := range u.PerDevice {
		if over[name] {
			if a.overSince[name].IsZero() {
				a.overSince[name] = at
			}
			continue
		}
		delete(a.overSince, name)
		a.underAt[name] = at
	}
	for _, m := range []map[string]time.Time{a.overSince, a.underAt} {
		for name := range m {
			if _, ok := caps[name]; !ok {
				delete(m, name)
			}
		}
	}
}

// PollGrace is how long a client the poll found pushing its device over
// its cap gets after terminate_client, then after SIGTERM, before the next
// step: a client busy in CUDA dies by itself within a second of
// terminate_client, but a sleeping one keeps its memory until it is
// signalled (mps.Controller.TerminateClient), and its neighbours' want of
// that memory is what an escape costs (issue 39).
const PollGrace = 200 * time.Millisecond

// annotate says of an action how it was found and since when its client
// escaped: its device's crossing of its cap, or its own start. What the
// poll (which stands in for the connect check where a control.log cannot
// be followed) finds in a client's environment is stopped as the connect
// check stops it, at once; a device it finds over its cap is brought back
// under within PollGrace of each step.
func (a *Accountant) annotate(act *Action, detected string) {
	act.Detected = detected
	if act.Cause == CauseMemory {
		act.Escape = EscapeTime{From: EscapeFromCap, Since: a.overSince[act.Device], Bound: a.underAt[act.Device]}
		if detected == DetectedPoll {
			act.Grace = PollGrace
		}
		return
	}
	act.Escape = EscapeTime{From: EscapeFromStart, Since: a.startTime(act.StartTicks)}
	act.KillFirst = detected == DetectedPoll
}

// logChanges logs devices going over or back under their cap, and unknown,
// mismatched and escaping clients when first seen.
func (a *Accountant) logChanges(ctx context.Context, r Report, sampled map[gpu.UUID][]gpu.Process) {
	over := map[string]bool{}
	for _, o := range r.Decision.Over {
		over[o.Device] = true
		if !a.over[o.Device] {
			msg := "virtual device over its memory cap"
			if _, _, pod := ParsePodName(o.Device); pod {
				msg = "Cloudpods pod over its server's memory cap on the GPU"
			}
			a.log.WarnContext(ctx, msg, "device", o.Device, "gpu", o.GPU,
				"used_mib", o.UsedBytes>>20, "cap_mib", o.CapBytes>>20, "pids", o.PIDs, "policy", string(r.Policy))
		}
	}
	for dev := range a.over {
		if d, measured := r.Usage.PerDevice[dev]; measured && !over[dev] {
			a.log.InfoContext(ctx, "virtual device back under its memory cap", "device", dev, "used_mib", d.UsedBytes>>20)
		} else if !measured {
			over[dev] = true // not measured this tick: keep the state
		}
	}
	a.over = over
	reported := reportKeys{}
	for k := range a.reported {
		if _, ok := sampled[k.gpu]; !ok {
			reported[k] = true // a GPU this pass did not look at
		}
	}
	firstSeen := func(k reportKey) bool {
		reported[k] = true
		return !a.reported[k]
	}
	for _, u := range r.Usage.Unknown {
		if firstSeen(unknownKey(u)) {
			a.logUnknown(ctx, u, r.Policy)
		}
	}
	for _, m := range r.Usage.Mismatches {
		if firstSeen(reportKey{kind: "mismatch", gpu: m.GPU, pid: m.PID, start: m.StartTicks, device: m.Device, env: m.Environment, source: m.Source}) {
			a.log.WarnContext(ctx, "MPS client's environment or view disagrees with its identity file; billed by its identity", "gpu", m.GPU,
				"pid", m.PID, "device", m.Device, "environment", m.Environment, "source", m.Source, "used_mib", uint64(m.UsedBytes)>>20, "reason", m.Reason)
		}
	}
	for _, e := range r.Usage.Escapes {
		if firstSeen(escapeKey(e)) {
			a.logEscape(ctx, e, r.Policy)
		}
	}
	for _, w := range r.Usage.WithoutView {
		if firstSeen(reportKey{kind: "view", pid: w.PID, start: w.StartTicks, device: w.Device, reason: w.Reason}) {
			a.log.WarnContext(ctx, "MPS client sees the whole GPU, not its device's view (reported, never terminated)", "gpu", w.GPU,
				"pid", w.PID, "device", w.Device, "source", w.Source, "used_mib", uint64(w.UsedBytes)>>20, "reason", w.Reason)
		}
	}
	a.reported = reported
}

func escapeKey(e Escape) reportKey {
	return reportKey{kind: "escape", gpu: e.GPU, pid: e.PID, start: e.StartTicks, device: e.Device, reason: e.Reason}
}

func (a *Accountant) logEscape(ctx context.Context, e Escape, p config.AccountingPolicy) {
	attrs := []any{"gpu", e.GPU, "pid", e.PID, "device", e.Device, "source", e.Source, "used_mib", uint64(e.UsedBytes) >> 20, "reason", e.Reason, "policy", string(p)}
	if e.Server != "" {
		attrs = append(attrs, "server", e.Server)
	}
	a.log.WarnContext(ctx, "MPS client's environment escapes its device's QoS or memory limit; terminated under enforce", attrs...)
}

func unknownKey(u UnknownProcess) reportKey {
	return reportKey{kind: "unknown", gpu: u.GPU, pid: u.PID, reason: u.Reason}
}

func (a *Accountant) logUnknown(ctx context.Context, u UnknownProcess, p config.AccountingPolicy) {
	if u.Hidden {
		a.log.WarnContext(ctx, "MPS client in a container whose device cannot be established; terminated under enforce", "gpu", u.GPU,
			"pid", u.PID, "used_mib", uint64(u.UsedBytes)>>20, "environment", u.Environment, "reason", u.Reason, "policy", string(p))
		return
	}
	attrs := []any{"gpu", u.GPU, "pid", u.PID, "used_mib", uint64(u.UsedBytes) >> 20, "device", u.Device, "source", u.Source, "environment", u.Environment, "reason", u.Reason}
	if u.Server != "" {
		attrs = append(attrs, "server", u.Server)
	}
	a.log.WarnContext(ctx, "MPS client billed to no virtual device (reported, never terminated)", attrs...)
}

// refresh re-reads the identity files and the host's mount namespace; a
// failure is logged once, and the sample goes on with what could be read
// (at worst every container process is unknown, never misbilled).
func (a *Accountant) refresh(ctx context.Context) {
	msg := ""
	if err := a.mapper.Refresh(); err != nil {
		msg = err.Error()
		switch {
		case msg == a.refreshErr:
		case errors.Is(err, ErrOwnNamespace) && !strings.Contains(msg, "\n"):
			a.log.WarnContext(ctx, "accounting: processes in the daemon's own mount namespace count as outside containers", "err", err)
		default:
			a.log.ErrorContext(ctx, "accounting cannot tell containers' processes apart", "err", err)
		}
	}
	a.refreshErr = msg
}

// mergeUsage is the "previous sample" for the next tick: this one's
// devices, and the older figures of devices not measured this time, so a
// GPU whose listing failed once does not make all its clients look new.
func mergeUsage(prev *Usage, cur Usage) *Usage {
	out := Usage{PerDevice: maps.Clone(cur.PerDevice), Unknown: cur.Unknown}
	if prev != nil {
		for name, d := range prev.PerDevice {
			if _, ok := out.PerDevice[name]; !ok {
				out.PerDevice[name] = d
			}
		}
	}
	return &out
}
