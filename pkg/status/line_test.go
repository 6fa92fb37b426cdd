package status

import (
	"testing"
	"time"
)

// The status line says what an operator looks for first: how many GPUs
// and devices, what is unhealthy or unreachable, and then what waits or
// failed, each error on its first line only.
func TestLine(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	since := now.Add(-90 * time.Second)
	for _, tc := range []struct {
		name string
		st   Status
		want string
	}{
		{"healthy", Status{Ready: true, GPUs: []GPU{{Healthy: true}, {Healthy: true}}, VirtualDevices: 6, InventoryReachable: true},
			"2 GPUs, 6 virtual devices, inventory reachable"},
		{"simulated, one GPU unhealthy, inventory away", Status{Simulated: true, GPUs: []GPU{{Healthy: true}, {}}, VirtualDevices: 4,
			LastError: "syncing: connection refused\ndetails"},
			"SIMULATED: 2 GPUs, 4 virtual devices, 1 GPUs unhealthy, inventory unreachable; syncing: connection refused"},
		{"stalled, held, restart pending, config error", Status{Ready: true, InventoryReachable: true,
			Loop: Loop{Step: "reconcile", Since: &since, Stalled: true}, ConfigHeld: &Held{Reason: "it would remove all 6", ApplyAt: now.Add(30 * time.Second)},
			RestartPending: []string{"mps_listen_address", "mps_control_timeout"}, ConfigError: "host.conf:3: bad\nmore"},
			"0 GPUs, 0 virtual devices, inventory reachable; main loop stalled in reconcile for 1m30s; config change held back until 12:00:30: it would remove all 6; restart to apply mps_listen_address,mps_control_timeout; config error, running the last good one: host.conf:3: bad"},
		{"a ready daemon's last error is not shown", Status{Ready: true, LastError: "old", InventoryReachable: true},
			"0 GPUs, 0 virtual devices, inventory reachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.st.Line(now); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}
