package mps

import "context"

// What the external tests (package mps_test, which may import the simulated
// control without an import cycle) need of the package's insides.

// Command sends one raw command line, as the controller does for its calls.
func (c *Controller) Command(ctx context.Context, line string) (string, error) {
	return c.command(ctx, line)
}

// RecordedMode is the server mode a daemon in pipeDir was started with.
var RecordedMode = recordedMode

// SetRename replaces how the Guard moves a socket (EXDEV and other
// failures without a second file system).
func (g *Guard) SetRename(f func(old, new string) error) { g.rename = f }

// SetLive replaces how the Guard tells whether a socket answers (the
// simulated daemon's never do).
func (g *Guard) SetLive(f func(path string) bool) { g.live = f }
