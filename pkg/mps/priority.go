package mps

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Client priorities (issue 13). The control's set_default_client_priority
// takes 0 (normal) or 1 (below normal); measured on an H100, driver 580,
// control 13000 (docs/gpu-runs/qos-probe.md):
//
//	get_default_client_priority      -> "0"
//	set_default_client_priority 1    -> nothing (success)
//	get_default_client_priority      -> "1"
//	set_default_client_priority 2    -> "Invalid priority value - must be 0 or 1!"
//
// A client's CUDA_MPS_CLIENT_PRIORITY overrides the default either way (a
// client at 0 under a default of 1 was served as normal): the priority is a
// scheduling hint, not a limit. The control names no per-server priority
// command (`strings` finds only "_default_ priority"), and needs none: a
// server that is already running gives the clients that connect after a
// change the new default (measured on an H100,
// docs/gpu-runs/qos-probe-running.md). LimitsMatch and SetServerLimits
// therefore leave the priority out: the default is all there is to set.

// ErrInvalidPriority: `Invalid priority value - must be 0 or 1!`.
var ErrInvalidPriority = errors.New("invalid MPS client priority")

// MsgInvalidPriority is what set_default_client_priority answers to a value
// other than 0 and 1.
const MsgInvalidPriority = "Invalid priority value - must be 0 or 1!"

// ParseClientPriority reads the answer of get_default_client_priority.
func ParseClientPriority(out string) (int, error) {
	switch s := strings.TrimSpace(out); s {
	case "0", "1":
		return int(s[0] - '0'), nil
	}
	return 0, fmt.Errorf("parsing client priority from %q: want 0 or 1", out)
}

// setDefaultClientPriority sets the priority of clients that ask for none.
// A control without client priorities (an older driver: the command is
// unknown) treats every client as normal, which is fine for 0 and an error
// for 1.
func (c *Controller) setDefaultClientPriority(ctx context.Context, p int) error {
	if p != 0 && p != 1 {
		return fmt.Errorf("client priority %d: want 0 (normal) or 1 (below normal)", p)
	}
	out, err := c.command(ctx, "set_default_client_priority "+strconv.Itoa(p))
	switch {
	case errors.Is(err, ErrUnknownCommand) && p == 0:
		return nil
	case errors.Is(err, ErrUnknownCommand):
		return fmt.Errorf("setting default client priority %d: this MPS control has no client priorities (an older driver): %w", p, err)
	case err != nil:
		return fmt.Errorf("setting default client priority %d: %w", p, err)
	}
	if s := strings.TrimSpace(out); s != "" {
		return fmt.Errorf("setting default client priority %d: mps control answered %q", p, s)
	}
	return nil
}

// defaultClientPriority reads the priority of clients that ask for none; 0
// from a control without client priorities.
func (c *Controller) defaultClientPriority(ctx context.Context) (int, error) {
	out, err := c.command(ctx, "get_default_client_priority")
	if errors.Is(err, ErrUnknownCommand) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("client priority: %w", err)
	}
	p, err := ParseClientPriority(out)
	if err != nil {
		return 0, fmt.Errorf("client priority: %w", err)
	}
	return p, nil
}
