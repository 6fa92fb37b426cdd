package accounting

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"yunion.io/x/mps-daemon/pkg/gpu"
)

// DefaultGrace is how long a terminated client gets to go before the next
// step (SIGTERM, then SIGKILL).
const DefaultGrace = 5 * time.Second

// ActiveWait is how long a client to be killed once its context is up
// (Action.AwaitActive) is waited for: its server's ACTIVE line came 10-15
// ms after the client connected to a running server and 345 ms after
// when the client had to wait for the server to start (H200,
// docs/gpu-runs/probe-wedge-2026-11-29.txt). A client that never says so
// (its server.log not followed, or it asked for no context) is killed
// then; only then can the kill land in the middle of a connection.
const ActiveWait = 2 * time.Second

// activeKept is how long a client's ACTIVE line is remembered, for a
// decision to kill it that comes after the line.
const activeKept = 10 * time.Second

// stepAwaitActive: nothing sent yet, the client's context awaited
// (Action.AwaitActive); not a step taken, so not reported.
const stepAwaitActive = "await_active"

// Terminator is one GPU's MPS control; *mps.Controller is one.
type Terminator interface {
	TerminateClient(ctx context.Context, serverPID, clientPID int) error
	// ClientServers maps client PIDs to their server PIDs.
	ClientServers(ctx context.Context) (map[int]int, error)
}

// Killer sends signals; signal 0 only asks whether the process exists.
type Killer interface {
	Signal(pid int, sig syscall.Signal) error
}

// SyscallKiller signals with kill(2), and through a pidfd where it must be
// sure of the process (SignalSame).
type SyscallKiller struct{}

// Signal implements Killer.
func (SyscallKiller) Signal(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }

// errNotSame: the PID names another process than the one checked.
var errNotSame = errors.New("the PID names another process now")

// SignalSame sends sig to pid only if same, asked after a pidfd of pid is
// open, says it is still the process checked: the pidfd names one process
// for good, so a PID reused between the check and the signal cannot get
// it. A kernel without pidfd_open (before Linux 5.3) is asked with kill(2)
// right after same.
func (SyscallKiller) SignalSame(pid int, sig syscall.Signal, same func() bool) error {
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case errors.Is(err, syscall.ESRCH):
		return syscall.ESRCH
	case err != nil:
		if !same() {
			return errNotSame
		}
		return syscall.Kill(pid, sig)
	}
	defer unix.Close(fd)
	if !same() {
		return errNotSame
	}
	return unix.PidfdSendSignal(fd, sig, nil, 0)
}

// sameSignaller is a Killer that signals a process only while it is the
// one checked (SyscallKiller).
type sameSignaller interface {
	SignalSame(pid int, sig syscall.Signal, same func() bool) error
}

// Steps an Enforcer takes, as logged and reported.
const (
	StepTerminateClient = "terminate_client" // MPS tore the client's context down
	StepSIGTERM         = "sigterm"
	StepSIGKILL         = "sigkill"
	StepGone            = "gone"    // the process exited
	StepGaveUp          = "gave_up" // still there after SIGKILL and a grace period
	StepFailed          = "failed"  // a step failed; the next one follows at once or next tick
)

// StepNames lists every step, for series that must exist before the first.
func StepNames() []string {
	return []string{StepTerminateClient, StepSIGTERM, StepSIGKILL, StepGone, StepGaveUp, StepFailed}
}

// Step is one thing an Enforcer did.
type Step struct {
	Action
	Step string
	Err  error
	// At is when it was done; First marks the step that first acted on
	// the client (terminate_client, or the signal that stood in for it):
	// where its escape ends.
	At    time.Time
	First bool
}

// EnforcerOptions wires an Enforcer.
type EnforcerOptions struct {
	// Grace is how long each step gets before the next; 0 means DefaultGrace.
	Grace time.Duration
	// ActiveWait is how long a client's context is awaited
	// (Action.AwaitActive); 0 means ActiveWait.
	ActiveWait time.Duration
	// Killer signals processes; nil means SyscallKiller.
	Killer Killer
	// Procs tells whether a PID is still the process an action was about:
	// Mapper.StartTicks. Required.
	Procs interface {
		StartTicks(pid int) (uint64, error)
	}
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	Log *slog.Logger
}

// Enforcer carries out Decide's actions. It never waits: Run takes the first
// step of each new action and records it; each later Run moves a recorded
// one on once its grace period has passed: the process gone, or still there
// (alive, or still listed by NVML) and signalled, SIGTERM then SIGKILL. It
// is used from one goroutine (the agent's loop).
//
// Both ends were seen on an H200: after terminate_client a client busy in
// CUDA died by itself within a second, while a sleeping one kept its memory
// and stayed listed until SIGTERM (see mps.Controller.TerminateClient).
type Enforcer struct {
	grace   time.Duration
	awaitUp time.Duration
	killer  Killer
	procs   interface{ StartTicks(int) (uint64, error) }
	now     func() time.Time
	log     *slog.Logger
	pending map[int]*pendingKill
	// active are the clients whose context came up lately (Activated),
	// with when the Enforcer heard.
	active map[int]time.Time
}

type pendingKill struct {
	Action
	step     string // the last step taken
	deadline time.Time
	// first: the next signal is the first step that acts on the client.
	first bool
}

// NewEnforcer builds an Enforcer.
func NewEnforcer(o EnforcerOptions) (*Enforcer, error) {
	if o.Procs == nil {
		return nil, errors.New("accounting enforcer: no process reader")
	}
	e := &Enforcer{grace: o.Grace, awaitUp: o.ActiveWait, killer: o.Killer, procs: o.Procs, now: o.Now, log: o.Log, pending: map[int]*pendingKill{}, active: map[int]time.Time{}}
	if e.grace <= 0 {
		e.grace = DefaultGrace
	}
	if e.awaitUp <= 0 {
		e.awaitUp = ActiveWait
	}
	if e.killer == nil {
		e.killer = SyscallKiller{}
	}
	if e.now == nil {
		e.now = time.Now
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	return e, nil
}

// graceOf is how long a's client gets after each step: its own Grace,
// else the Enforcer's.
func (e *Enforcer) graceOf(a Action) time.Duration {
	if a.Grace > 0 {
		return a.Grace
	}
	return e.grace
}

// Terminating are the PIDs being terminated, for History.Terminating.
func (e *Enforcer) Terminating() map[int]bool {
	out := make(map[int]bool, len(e.pending))
	for pid := range e.pending {
		out[pid] = true
	}
	return out
}

// Reset forgets the terminations under way (the policy left enforce).
func (e *Enforcer) Reset(ctx context.Context) {
	for _, pid := range slices.Sorted(maps.Keys(e.pending)) {
		e.logStep(ctx, slog.LevelInfo, "accounting: termination dropped, policy no longer enforce", e.pending[pid].Action, e.pending[pid].step, nil, time.Time{})
	}
	clear(e.pending)
}

// Run first moves on the terminations under way whose grace has passed
// (u is the current sample: a client still listed there has not gone,
// and one awaited whose context is up), then starts the new actions;
// terms has each GPU's MPS control, by UUID. It returns what it did.
func (e *Enforcer) Run(ctx context.Context, u Usage, actions []Action, terms map[gpu.UUID]Terminator) []Step {
	var steps []Step
	now := e.now()
	listed := listedPIDs(u)
	for _, pid := range slices.Sorted(maps.Keys(e.pending)) {
		p := e.pending[pid]
		if p.step == stepAwaitActive && listed[pid] {
			// Listed on the GPU: its context is up, whatever its
			// server.log says.
			steps = append(steps, e.signal(ctx, p, syscall.SIGKILL, StepSIGKILL, now))
			continue
		}
		if now.Before(p.deadline) {
			continue
		}
		if !e.same(p.Action) {
			steps = append(steps, e.finish(ctx, p, StepGone, nil, now))
			continue
		}
		alive := e.alive(pid)
		if !alive && !listed[pid] {
			steps = append(steps, e.finish(ctx, p, StepGone, nil, now))
			continue
		}
		switch p.step {
		case stepAwaitActive:
			// Its context never said it came up.
			steps = append(steps, e.signal(ctx, p, syscall.SIGKILL, StepSIGKILL, now))
		case StepTerminateClient, StepFailed:
			steps = append(steps, e.signal(ctx, p, syscall.SIGTERM, StepSIGTERM, now))
		case StepSIGTERM:
			steps = append(steps, e.signal(ctx, p, syscall.SIGKILL, StepSIGKILL, now))
		default:
			err := fmt.Errorf("PID %d still there %s after SIGKILL (alive %t, listed by NVML %t)", pid, e.grace, alive, listed[pid])
			steps = append(steps, e.finish(ctx, p, StepGaveUp, err, now))
		}
	}
	servers := map[gpu.UUID]clientServers{}
	e.forgetActive(now)
	for _, a := range actions {
		if _, ok := e.pending[a.PID]; ok {
			continue
		}
		if !e.same(a) {
			steps = append(steps, Step{Action: a, Step: StepGone, At: now})
			e.logStep(ctx, slog.LevelInfo, "accounting: client exited before termination", a, StepGone, nil, time.Time{})
			continue
		}
		p := &pendingKill{Action: a}
		e.pending[a.PID] = p
		if a.KillFirst {
			p.first = true
			if _, up := e.active[a.PID]; a.AwaitActive && !up {
				p.step, p.deadline = stepAwaitActive, now.Add(e.awaitUp)
				continue
			}
			steps = append(steps, e.signal(ctx, p, syscall.SIGKILL, StepSIGKILL, now))
			continue
		}
		err := e.terminateClient(ctx, a, terms[a.GPU], servers)
		if err == nil {
			p.step, p.deadline = StepTerminateClient, now.Add(e.graceOf(a))
			steps = append(steps, Step{Action: a, Step: StepTerminateClient, At: now, First: true})
			e.logStep(ctx, slog.LevelWarn, "accounting: terminating "+a.what(), a, StepTerminateClient, nil, now)
			continue
		}
		// No MPS way to stop it: signal at once.
		p.step, p.first = StepFailed, true
		steps = append(steps, Step{Action: a, Step: StepFailed, Err: err, At: now})
		e.logStep(ctx, slog.LevelWarn, "accounting: terminate_client failed, signalling", a, StepTerminateClient, err, time.Time{})
		steps = append(steps, e.signal(ctx, p, syscall.SIGTERM, StepSIGTERM, now))
	}
	return steps
}

// Activated hears of clients whose context is up: those awaited
// (Action.AwaitActive) are sent SIGKILL now, and the others remembered a
// while, for a decision that comes after their line. It returns what it
// did.
func (e *Enforcer) Activated(ctx context.Context, pids []int) []Step {
	now := e.now()
	e.forgetActive(now)
	var steps []Step
	for _, pid := range pids {
		e.active[pid] = now
		if p, ok := e.pending[pid]; ok && p.step == stepAwaitActive {
			steps = append(steps, e.signal(ctx, p, syscall.SIGKILL, StepSIGKILL, now))
		}
	}
	return steps
}

// forgetActive drops the clients heard of longer than activeKept ago.
func (e *Enforcer) forgetActive(now time.Time) {
	for pid, at := range e.active {
		if now.Sub(at) > activeKept {
			delete(e.active, pid)
		}
	}
}

// clientServers is one GPU's client -> server map, or why there is none.
type clientServers struct {
	m   map[int]int
	err error
}

// terminateClient asks the GPU's MPS control to drop the client; servers
// caches each GPU's client -> server map, or its failure, for this Run, so a
// wedged control costs one timeout per Run, not one per action.
func (e *Enforcer) terminateClient(ctx context.Context, a Action, t Terminator, servers map[gpu.UUID]clientServers) error {
	if t == nil {
		return fmt.Errorf("no MPS control known for GPU %s", a.GPU)
	}
	cs, ok := servers[a.GPU]
	if !ok {
		cs.m, cs.err = t.ClientServers(ctx)
		servers[a.GPU] = cs
	}
	if cs.err != nil {
		return fmt.Errorf("finding the MPS server of PID %d: %w", a.PID, cs.err)
	}
	srv, ok := cs.m[a.PID]
	if !ok {
		return fmt.Errorf("PID %d is not a client of GPU %s's MPS servers", a.PID, a.GPU)
	}
	return t.TerminateClient(ctx, srv, a.PID)
}

// signal sends sig and records step; a process that is already gone (or
// whose PID names another process now) is done. Through a Killer that can
// (SyscallKiller), the signal goes to the process checked or to none.
func (e *Enforcer) signal(ctx context.Context, p *pendingKill, sig syscall.Signal, step string, now time.Time) Step {
	var err error
	if k, ok := e.killer.(sameSignaller); ok {
		err = k.SignalSame(p.PID, sig, func() bool { return e.same(p.Action) })
	} else {
		err = e.killer.Signal(p.PID, sig)
	}
	if errors.Is(err, syscall.ESRCH) || errors.Is(err, errNotSame) {
		return e.finish(ctx, p, StepGone, nil, now)
	}
	first := p.first
	p.step, p.deadline, p.first = step, now.Add(e.graceOf(p.Action)), false
	if err != nil {
		err = fmt.Errorf("sending %s to PID %d: %w", sig, p.PID, err)
		e.logStep(ctx, slog.LevelError, "accounting: signalling "+p.what()+" failed", p.Action, step, err, time.Time{})
		return Step{Action: p.Action, Step: step, Err: err, At: now}
	}
	at := time.Time{}
	if first {
		at = now
	}
	e.logStep(ctx, slog.LevelWarn, "accounting: signalled "+p.what(), p.Action, step, nil, at)
	return Step{Action: p.Action, Step: step, At: now, First: first}
}

func (e *Enforcer) finish(ctx context.Context, p *pendingKill, step string, err error, now time.Time) Step {
	delete(e.pending, p.PID)
	level, msg := slog.LevelInfo, "accounting: terminated client is gone"
	if err != nil {
		level, msg = slog.LevelError, "accounting: "+p.what()+" would not go"
	}
	e.logStep(ctx, level, msg, p.Action, step, err, time.Time{})
	return Step{Action: p.Action, Step: step, Err: err, At: now}
}

// what names the client an action is about, for its log lines.
func (a Action) what() string {
	if a.Server != "" {
		if a.Cause == CauseMemory {
			return "Cloudpods pod's client over its server's cap on the GPU"
		}
		return "Cloudpods pod's client escaping its memory limit"
	}
	switch a.Cause {
	case CauseQoS:
		return "client escaping its device's QoS"
	case CauseLimit:
		return "client escaping its device's memory limit"
	case CauseNoDevice:
		return "container client without a device"
	}
	return "client over its device's cap"
}

// same reports whether a.PID is still the process a was about: alive, not a
// zombie, and started when it did. A reused PID is never signalled.
func (e *Enforcer) same(a Action) bool {
	start, err := e.procs.StartTicks(a.PID)
	if errors.Is(err, ErrExited) {
		return false
	}
	if err != nil {
		// Unreadable stat: signal 0 and NVML's list decide.
		e.log.Debug("accounting: cannot read start time", "pid", a.PID, "err", err)
		return true
	}
	return a.StartTicks == 0 || start == a.StartTicks
}

func (e *Enforcer) alive(pid int) bool {
	err := e.killer.Signal(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// logStep writes the one line each step gets; the first step that acts
// on a client (first, its time) says how it was found and how long its
// escape lasted.
func (e *Enforcer) logStep(ctx context.Context, level slog.Level, msg string, a Action, step string, err error, first time.Time) {
	attrs := []any{"device", a.Device, "gpu", a.GPU, "pid", a.PID, "cause", a.Cause,
		"used_mib", a.UsedBytes >> 20, "device_used_mib", a.DeviceUsedBytes >> 20, "cap_mib", a.CapBytes >> 20,
		"reason", a.Reason, "step", step}
	if a.Server != "" {
		attrs = append(attrs, "server", a.Server)
	}
	if !first.IsZero() {
		attrs = append(attrs, "detected", a.Detected)
		if least, most, ok := a.Escape.Lasted(first); ok {
			attrs = append(attrs, "escape_from", a.Escape.From, "escape_seconds", roundSeconds(least))
			if most > 0 {
				attrs = append(attrs, "escape_seconds_at_most", roundSeconds(most))
			}
		}
	}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	e.log.Log(ctx, level, msg, attrs...)
}

// roundSeconds is d in seconds to the millisecond, for a log line.
func roundSeconds(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond)) / float64(time.Second)
}

func listedPIDs(u Usage) map[int]bool {
	out := map[int]bool{}
	for _, d := range u.PerDevice {
		for _, pid := range d.PIDs {
			out[pid] = true
		}
	}
	for _, p := range u.Unknown {
		out[p.PID] = true
	}
	return out
}
