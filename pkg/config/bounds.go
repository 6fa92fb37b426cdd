package config

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// Bounds are the values a duration key of host.conf may take, both ends
// included.
type Bounds struct{ Min, Max time.Duration }

// durationBounds are the bounds of every duration key. Below Min the daemon
// would spend its time (and the inventory's) on its own housekeeping:
// `mps_sync_interval: 1ns` once cost 7 CPU-seconds and 1,096 inventory
// requests in 10 s, and a timeout under a second fails calls that are merely
// slow. Above Max a slip of the unit ("30m" for "30s") would leave a dead
// MPS daemon, a lost device or a hung call unnoticed for hours; nothing
// needs longer. A key missing here has no bounds beyond being positive.
var durationBounds = map[string]Bounds{
	"mps_sync_interval":     {time.Second, time.Hour},
	"mps_health_interval":   {time.Second, 10 * time.Minute},
	"mps_control_timeout":   {time.Second, 2 * time.Minute},
	"mps_inventory_timeout": {time.Second, 2 * time.Minute},
	"mps_reload_hold_time":  {time.Second, time.Hour},
}

// DurationBounds returns the bounds of a duration key, for callers that
// derive their own limits from them (and for documentation tests).
func DurationBounds(key string) (Bounds, bool) {
	b, ok := durationBounds[key]
	return b, ok
}

// boundedDuration reads a duration key and checks it against its bounds.
func boundedDuration(key string, v *yaml.Node) (time.Duration, error) {
	d, err := durationValue(v)
	if err != nil {
		return 0, err
	}
	if b, ok := durationBounds[key]; ok && (d < b.Min || d > b.Max) {
		return 0, fmt.Errorf("must be from %s to %s, got %s", shortDuration(b.Min), shortDuration(b.Max), describe(v))
	}
	return d, nil
}

// shortDuration prints whole hours, minutes and seconds as an operator
// writes them ("1h", not "1h0m0s").
func shortDuration(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d >= time.Second && d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}
