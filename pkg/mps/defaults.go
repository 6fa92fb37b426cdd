package mps

import (
	"context"
	"fmt"
)

// EnsureDefaults makes the daemon's defaults l, asking first: when the
// getters already show l, nothing is set (set is false); otherwise it is
// SetDefaults, every default set and read back.
//
// What the getters show is rounded: the memory limit to whole GiB from
// 1 GiB on (DisplayMemLimit), the thread percentage to a tenth. A drift
// inside that rounding (20000M set by hand where 20389M is wanted) reads the
// same and is not seen here. force sets whatever the getters show; the
// caller forces whenever it cannot rule such a drift out: a daemon it has
// not set yet, limits that changed since it last set them, and, for the
// drift nobody can see, every so often (pkg/agent: every tenth check).
// A limit the control would refuse is always sent, so that the refusal is
// the error SetDefaults reports.
func (c *Controller) EnsureDefaults(ctx context.Context, l Limits, force bool) (set bool, err error) {
	valid := l.ThreadPercentage > 0 && l.ThreadPercentage <= 100 && (l.ClientPriority == 0 || l.ClientPriority == 1)
	if !force && valid {
		got, err := c.Defaults(ctx)
		if err != nil {
			return false, fmt.Errorf("reading mps limits: %w", err)
		}
		if DefaultsMatch(got, l) {
			return false, nil
		}
		c.log.Debug("mps defaults differ from the wanted ones; setting them", "memory_limit", orNone(DisplayMemLimit(got.MemoryLimit)),
			"thread_percentage", FormatThreadPercentage(got.ThreadPercentage), "client_priority", got.ClientPriority)
	}
	return true, c.SetDefaults(ctx, l)
}

// DefaultsMatch reports whether defaults read back (rounded) show what want
// sets, the client priority included.
func DefaultsMatch(got, want Limits) bool {
	return checkReadBack(got, want) == nil && got.ClientPriority == want.ClientPriority
}
