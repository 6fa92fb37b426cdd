package agent

import (
	"time"

	"yunion.io/x/mps-daemon/pkg/systemd"
)

// Notifier tells the service manager how the daemon is doing: READY=1 once
// the first full reconcile has registered every device with enforced caps,
// STATUS= lines, RELOADING=1 around reloads and WATCHDOG=1 from the loop.
type Notifier interface {
	Notify(state string) error
}

// Systemd notifies through $NOTIFY_SOCKET (sd_notify); without it (not
// started by systemd) every call is a no-op.
type Systemd struct{}

// Notify implements Notifier.
func (Systemd) Notify(state string) error { return systemd.Notify(state) }

// WatchdogInterval is how often systemd wants WATCHDOG=1; 0 when no
// watchdog is set for this process.
func WatchdogInterval() (time.Duration, error) { return systemd.WatchdogInterval() }

type noNotifier struct{}

func (noNotifier) Notify(string) error { return nil }
