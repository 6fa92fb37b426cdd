// Package systemd is the little the two services say to systemd (sd_notify
// through $NOTIFY_SOCKET): READY=1, STATUS=, RELOADING=1 and WATCHDOG=1.
// Outside systemd (no $NOTIFY_SOCKET) every call does nothing.
package systemd

import (
	"fmt"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Ready is the state sent once the service does its work.
const Ready = daemon.SdNotifyReady

// Notify sends one state.
func Notify(state string) error {
	if _, err := daemon.SdNotify(false, state); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}

// WatchdogInterval is how often systemd wants WATCHDOG=1: half its
// WatchdogSec, leaving room for one late tick; 0 when no watchdog is set for
// this process.
func WatchdogInterval() (time.Duration, error) {
	d, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return 0, fmt.Errorf("reading WATCHDOG_USEC: %w", err)
	}
	return d / 2, nil
}

// Reloading is RELOADING=1 with the timestamp newer systemd wants
// (Type=notify-reload); older systemd ignores the extra field.
func Reloading() string {
	return "RELOADING=1\n" + daemon.SdNotifyMonotonicUsec()
}
