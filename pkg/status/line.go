package status

import (
	"fmt"
	"strings"
	"time"
)

// Line is the one line systemd shows of the daemon at now (`systemctl
// status`, STATUS=): GPUs and devices, unhealthy GPUs, the inventory,
// then a stalled loop, a held configuration change, keys waiting for a
// restart, and the configuration's or the last reconcile's error.
func (s Status) Line(now time.Time) string {
	unhealthy := 0
	for _, g := range s.GPUs {
		if !g.Healthy {
			unhealthy++
		}
	}
	line := fmt.Sprintf("%d GPUs, %d virtual devices", len(s.GPUs), s.VirtualDevices)
	if unhealthy > 0 {
		line += fmt.Sprintf(", %d GPUs unhealthy", unhealthy)
	}
	if s.InventoryReachable {
		line += ", inventory reachable"
	} else {
		line += ", inventory unreachable"
	}
	if s.Simulated {
		line = "SIMULATED: " + line
	}
	if msg := s.Loop.StallMessage(now); msg != "" {
		line += "; " + msg
	}
	if h := s.ConfigHeld; h != nil {
		line += fmt.Sprintf("; config change held back until %s: %s", h.ApplyAt.Format(time.TimeOnly), h.Reason)
	}
	if len(s.RestartPending) > 0 {
		line += "; restart to apply " + strings.Join(s.RestartPending, ",")
	}
	if s.ConfigError != "" {
		line += "; config error, running the last good one: " + firstLine(s.ConfigError)
	} else if !s.Ready && s.LastError != "" {
		line += "; " + firstLine(s.LastError)
	}
	return line
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
