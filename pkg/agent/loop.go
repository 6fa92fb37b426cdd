package agent

import (
	"context"
	"sync"
	"time"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/status"
)

// The Run loop does every step one after the other: reconciles, reloads,
// health probes, accounting. Each step runs under a deadline (stepBudget)
// and every call inside it has its own timeout (MPS control calls
// mps_control_timeout, inventory requests mps_inventory_timeout, config
// files are read without blocking), so a step ends by itself. If one does
// not (a call that ignores its deadline: a driver call stuck in the kernel,
// a bug), the loop is stalled: the watchdog below sees the heartbeat stuck
// in that step past stallAfter, logs it, makes /healthz and /readyz fail and
// stops WATCHDOG=1, so systemd (WatchdogSec) restarts the daemon. MPS
// control daemons survive that restart, and so do their clients.

// stallGrace is how far past its deadline a step may run before the loop
// counts as stalled: a step that honours its context returns well within it.
const stallGrace = 30 * time.Second

// acctStopWait bounds how long Run waits for the accounting loop to end.
const acctStopWait = 5 * time.Second

// stepBudget is the deadline of one step of the loop: room for a reconcile's
// worth of calls at their timeouts (an inventory request is tried 4 times),
// at least a minute.
func stepBudget(hc *config.HostConf) time.Duration {
	return max(time.Minute, 6*max(hc.ControlTimeout, hc.InventoryTimeout))
}

// heartbeat is which step the loop is in and since when.
type heartbeat struct {
	mu      sync.Mutex
	step    string
	since   time.Time
	stalled bool // the watchdog said so
}

func (h *heartbeat) enter(step string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.step, h.since = step, time.Now()
}

func (h *heartbeat) leave() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.step, h.since = "", time.Time{}
}

// check says whether the loop has been in one step longer than limit and
// whether that is news (stalled, or running again).
func (h *heartbeat) check(limit time.Duration) (step string, busy time.Duration, stalled, changed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.step != "" {
		busy = time.Since(h.since)
	}
	stalled = h.step != "" && busy > limit
	changed = stalled != h.stalled
	h.stalled = stalled
	return h.step, busy, stalled, changed
}

func (h *heartbeat) status() status.Loop {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := status.Loop{Step: h.step, Stalled: h.stalled}
	if h.step != "" {
		since := h.since
		st.Since = &since
	}
	return st
}

// step runs one step of the loop under its deadline, with the heartbeat
// saying so.
func (a *Agent) step(ctx context.Context, name string, f func(context.Context)) {
	a.beat.enter(name)
	defer a.beat.leave()
	ctx, cancel := context.WithTimeout(ctx, stepBudget(a.config().Host))
	defer cancel()
	f(ctx)
}

// stallAfter is how long one step may run before the loop counts as stalled.
func (a *Agent) stallAfter() time.Duration {
	if a.opts.StallAfter > 0 {
		return a.opts.StallAfter
	}
	return stepBudget(a.config().Host) + stallGrace
}

// watchdog watches the heartbeat until ctx ends: it logs a stall (and the
// recovery), and sends WATCHDOG=1 every opts.Watchdog while the loop is not
// stalled. It runs beside the loop, so a long but healthy step does not
// starve systemd's watchdog; a stalled one does, on purpose.
func (a *Agent) watchdog(ctx context.Context) {
	limit := a.stallAfter()
	tick := min(max(limit/4, 10*time.Millisecond), time.Second)
	if a.opts.Watchdog > 0 {
		tick = min(tick, a.opts.Watchdog)
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	var lastPing time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		step, busy, stalled, changed := a.beat.check(limit)
		switch {
		case stalled && changed:
			a.met.daemon.ObserveLoopStall()
			a.log.Error("main loop stalled: a step ran past its deadline; /healthz and /readyz fail, and systemd's watchdog restarts the daemon",
				"step", step, "running_for", busy.Round(time.Millisecond).String(), "limit", limit.String())
			a.sendNotify("STATUS=" + a.statusLine())
		case !stalled && changed:
			a.log.Info("main loop running again")
			a.sendNotify("STATUS=" + a.statusLine())
		}
		// The accounting loop (pkg/acctloop) is watched the same way.
		astep, abusy, astalled, achanged := a.acctBeat.check(limit)
		switch {
		case astalled && achanged:
			a.met.daemon.ObserveLoopStall()
			a.log.Error("accounting loop stalled: a step ran past its deadline; /healthz and /readyz fail, and systemd's watchdog restarts the daemon",
				"step", astep, "running_for", abusy.Round(time.Millisecond).String(), "limit", limit.String())
		case !astalled && achanged:
			a.log.Info("accounting loop running again")
		}
		stalled = stalled || astalled
		if !stalled && a.opts.Watchdog > 0 && time.Since(lastPing) >= a.opts.Watchdog {
			a.sendNotify("WATCHDOG=1")
			lastPing = time.Now()
		}
	}
}
