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
