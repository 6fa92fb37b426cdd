package agent

import (
	"time"

	"yunion.io/x/mps-daemon/pkg/status"
)

// A reload whose plan would take every virtual device off the host, or
// would drop the device YAML's NVIDIA_MPS entries for cuda_mps_replicas
// (plan.Risk), is what a file caught empty or half written looks like (a
// truncated host.conf turns sharing off; a truncated device YAML has no
// entry left). Applying it deletes every free device, and the next good
// save creates them again with new ids, under other caps. Such a reload is
// held back instead: logged, shown in /status (config_held), systemd's
// status line and the metric mps_daemon_config_held; and applied only once
// the files have held exactly the same bytes for mps_reload_hold_time of
// the configuration in force (30 s by default). An operator who means it waits that long; a save that
// was caught midway is over long before. Refusing it outright would leave
// "turn sharing off" with no way but a restart, and a restart would apply
// it without any check.

// heldChange is a configuration change held back: what /status shows, and
// the digest of the files that hold it.
type heldChange struct {
	status.Held
	digest string
}

// holdOrRelease decides about a risky change with this digest: it is held
// (and true returned) until the files have held it for hold; then it may go.
func (a *Agent) holdOrRelease(digest, reason string, hold time.Duration) (held bool) {
	now := time.Now()
	if h := a.held; h != nil && h.digest == digest && digest != "" {
		if !now.Before(h.ApplyAt) {
			a.log.Warn("applying a held-back configuration change: the files stayed unchanged", "reason", reason, "held_for", now.Sub(h.Since).Round(time.Second).String())
			return false
		}
		return true // still settling; said already
	}
	a.held = &heldChange{Held: status.Held{Reason: reason, Since: now, ApplyAt: now.Add(hold)}, digest: digest}
	a.met.daemon.ObserveReloadHeld()
	a.mu.Lock()
	shown := a.held.Held
	a.status.ConfigHeld = &shown
	a.mu.Unlock()
	a.log.Warn("configuration change held back: applied only if the files stay as they are; restore them to cancel it",
		"reason", reason, "apply_at", a.held.ApplyAt.Format(time.RFC3339), "hold", hold.String())
	a.sendNotify("STATUS=" + a.statusLine())
	return true
}

// releaseHeld forgets a held change: the files changed again, or it was
// applied.
func (a *Agent) releaseHeld() {
	if a.held == nil {
		return
	}
	a.held = nil
	a.mu.Lock()
	a.status.ConfigHeld = nil
	a.mu.Unlock()
}

// heldDue is when the held change, if any, is due for another look.
func (a *Agent) heldDue() (time.Time, bool) {
	if a.held == nil {
		return time.Time{}, false
	}
	return a.held.ApplyAt, true
}
