package accounting

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
)

// Checking a client as it connects (issue 39). A control daemon logs each
// client's connection the moment it happens, inside the client's cuInit,
// 100-130 ms before the client's first allocation can be granted, 400 ms
// when it starts the server (docs/gpu-runs/mps-probe-escape.txt). Whatever
// the accounting knows of a client from its environment and identity
// (limit.go, qos.go, the hidden container clients of DecideHidden) it
// knows then: so the client is checked at once, by the same rules as on a
// tick, and under enforce a client that escapes is sent SIGKILL there and
// then (Action.KillFirst), before it holds any memory: once its server
// says its context is up (Action.AwaitActive), 100 ms before it can
// allocate, never while it is still connecting, which would wedge the
// server (docs/gpu-runs/probe-wedge-2026-11-29.txt).
//
// What stands between the line and the signal: its PID may have been
// reused (the client came and went, and another process took its PID), so
// the process's start time is read first and must not be after the line's
// time; the lookup reads everything else through its /proc directory held
// open, its start time read again at the end; and the signal goes through
// a pidfd opened before the start time is read a last time (SyscallKiller.
// SignalSame). A client gone before it could be checked is reported as
// such; one whose /proc cannot be read is billed to no device and
// reported, never terminated, as on a tick.

// NewClient is a client that connected to a control daemon.
type NewClient struct {
	PID int
	// GPUs are the GPUs its control daemon serves: one in the per-GPU
	// layout, every GPU in the single layout (its line does not say which).
	GPUs []gpu.UUID
	// At is the time of its control daemon's line.
	At time.Time
}

// reuseSlack is how much later than its line a client may seem to have
// started: its start time has 10 ms ticks, the line's time a millisecond,
// and the two are converted through different clocks. A PID reused this
// soon after its client connected is not told apart (Linux hands PIDs out
// in turn, so that takes as many new processes as pid_max).
const reuseSlack = 200 * time.Millisecond

// seenFor is how long a client checked as it connected is not checked
// again: its second NEW CLIENT line comes 10-20 ms after the first.
const seenFor = time.Minute

// seenClient is a client checked as it connected.
type seenClient struct {
	start uint64
	at    time.Time
}

// Skip reasons of ConnectReport.
const (
	SkipExited = "exited before it could be checked"
	SkipReused = "its PID names a process started after the client connected"
)

// Skipped is a connecting client that was not checked.
type Skipped struct {
	PID    int
	Reason string
}

// Activated tells the accounting of clients whose context is up (their
// MPS server's ACTIVE lines): those caught as they connected are killed
// now under enforce (Action.AwaitActive). The report holds the steps
// taken.
func (a *Accountant) Activated(ctx context.Context, p config.AccountingPolicy, pids []int) ConnectReport {
	r := ConnectReport{Report: Report{Policy: p}}
	if !a.setPolicy(ctx, p) || len(pids) == 0 || p != config.AccountingEnforce {
		return r
	}
	r.Steps = a.enf.Activated(ctx, pids)
	return r
}

// ConnectReport is what Connected did: Report's Usage holds the clients
// checked (billed to their device, or unknown), its Escapes those whose
// environment escapes, its Steps the terminations begun.
type ConnectReport struct {
	Report
	// Checked counts the clients checked, Again the lines of clients
	// checked already (a client connects twice).
	Checked, Again int
	Skipped        []Skipped
}

// Connected checks clients as they connect, by the rules of a tick (caps,
// qos and terms as Tick takes them), and under enforce sends SIGKILL to
// every one that escapes. It never looks at memory: a device over its cap
// is the poll's and the tick's (Poll, Tick).
func (a *Accountant) Connected(ctx context.Context, p config.AccountingPolicy, clients []NewClient, caps map[string]uint64, qos map[string]DeviceQoS, terms map[gpu.UUID]Terminator) ConnectReport {
	r := ConnectReport{Report: Report{Policy: p}}
	if !a.setPolicy(ctx, p) || len(clients) == 0 {
		return r
	}
	a.refresh(ctx)
	gpus := map[gpu.UUID]bool{}
	for _, c := range clients {
		for _, g := range c.GPUs {
			gpus[g] = true
		}
	}
	u := Usage{PerDevice: map[string]DeviceUsage{}}
	u.devicesOf(caps, func(g gpu.UUID) bool { return gpus[g] })
	checked := map[int]bool{}
	for _, c := range clients {
		if checked[c.PID] {
			r.Again++
			continue
		}
		start, err := a.mapper.StartTicks(c.PID)
		_, seen := a.seen[c.PID]
		switch {
		case errors.Is(err, ErrExited) && seen:
			r.Again++ // checked at its first line, gone since (terminated, say)
			continue
		case errors.Is(err, ErrExited):
			r.Skipped = append(r.Skipped, Skipped{PID: c.PID, Reason: SkipExited})
			continue
		case err == nil && a.seen[c.PID].start == start:
			r.Again++
			continue
		case err == nil && !c.At.IsZero() && a.startTime(start).After(c.At.Add(reuseSlack)):
			r.Skipped = append(r.Skipped, Skipped{PID: c.PID, Reason: SkipReused})
			continue
		}
		id, err := a.lookupAny(c.PID, c.GPUs, caps, &u)
		if errors.Is(err, ErrExited) {
			r.Skipped = append(r.Skipped, Skipped{PID: c.PID, Reason: SkipExited})
			continue
		}
		if start != 0 && id.StartTicks != 0 && id.StartTicks != start {
			r.Skipped = append(r.Skipped, Skipped{PID: c.PID, Reason: SkipReused})
			continue
		}
		checked[c.PID] = true
		a.seen[c.PID] = seenClient{start: id.StartTicks, at: a.now()}
		r.Checked++
	}
	u.sort()
	a.hiddenOptional(&u)
	r.Usage = u
	r.Usage.Escapes = Escapes(u, caps, qos, a.serverMemory)
	h := History{Terminating: a.enf.Terminating()}
	acts := DecideEscapes(r.Usage.Escapes, u, caps, p, h, nil)
	acts = append(acts, DecideHidden(u, p, h, acts)...)
	for i := range acts {
		a.annotate(&acts[i], DetectedConnect)
		acts[i].KillFirst, acts[i].AwaitActive = true, true
	}
	r.Decision.Actions = acts
	for _, e := range r.Usage.Escapes {
		if k := escapeKey(e); !a.reported[k] {
			a.reported[k] = true
			a.logEscape(ctx, e, p)
		}
	}
	for _, un := range u.Unknown {
		if k := unknownKey(un); !a.reported[k] {
			a.reported[k] = true
			a.logUnknown(ctx, un, p)
		}
	}
	for _, s := range r.Skipped {
		a.log.InfoContext(ctx, "MPS client not checked as it connected", "pid", s.PID, "reason", s.Reason)
	}
	if p == config.AccountingEnforce {
		// Nothing sampled: a client checked here is not on the GPU yet.
		r.Steps = a.enf.Run(ctx, Usage{}, acts, terms)
	}
	return r
}

// lookupAny bills pid, a client of a control daemon serving gpus, to u:
// to the device of the first of gpus its identity (or, outside containers,
// its environment) names, else as unknown on the first GPU. In the
// per-GPU layout gpus is one GPU; in the single layout the client's line
// does not say which GPU it uses, and its device does.
func (a *Accountant) lookupAny(pid int, gpus []gpu.UUID, caps map[string]uint64, u *Usage) (Identity, error) {
	var firstID Identity
	var firstErr error
	for i, g := range gpus {
		id, err := a.lookup(pid, g, caps)
		if errors.Is(err, ErrExited) {
			return id, err
		}
		if err == nil && u.bill(g, gpu.Process{PID: pid}, id, nil) {
			return id, nil
		}
		if err == nil {
			// Named a device of another GPU, or one the host lacks: its
			// unknown entry was added; look further before keeping it.
			u.Unknown = u.Unknown[:len(u.Unknown)-1]
		}
		if i == 0 {
			firstID, firstErr = id, err
		}
	}
	if len(gpus) > 0 {
		u.bill(gpus[0], gpu.Process{PID: pid}, firstID, firstErr)
	}
	return firstID, firstErr
}

// forgetSeen drops the clients checked as they connected longer than
// seenFor before now.
func (a *Accountant) forgetSeen(now time.Time) {
	for _, pid := range slices.Collect(maps.Keys(a.seen)) {
		if now.Sub(a.seen[pid].at) > seenFor {
			delete(a.seen, pid)
		}
	}
}
