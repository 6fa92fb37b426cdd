package agent

import (
	"fmt"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
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
func (Systemd) Notify(state string) error {
	if _, err := daemon.SdNotify(false, state); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}

// WatchdogInterval is how often systemd wants WATCHDOG=1 (half its
// WatchdogSec, leaving room for one late tick); 0 when no watchdog is set
// for this process.
func WatchdogInterval() (time.Duration, error) {
	d, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return 0, fmt.Errorf("reading WATCHDOG_USEC: %w", err)
	}
	return d / 2, nil
}

// reloadingState is RELOADING=1 with the timestamp newer systemd wants
// (Type=notify-reload); older systemd ignores the extra field.
func reloadingState() string {
	return "RELOADING=1\n" + daemon.SdNotifyMonotonicUsec()
}

type noNotifier struct{}

func (noNotifier) Notify(string) error { return nil }
