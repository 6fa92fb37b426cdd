package acctloop

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
)

// clientLogs runs one follower per control.log. It is used from the
// accounting loop alone.
type clientLogs struct {
	log     *slog.Logger
	guard   *mps.Guard
	out     chan<- logBatch
	changed chan struct{}
	running map[string]*followedLog
	// wanted are the logs to follow, with their GPUs.
	wanted map[string][]gpu.UUID
	wg     sync.WaitGroup
}

type followedLog struct {
	cl     *mps.ClientLog
	cancel context.CancelFunc
}

// set follows the logs of want and no others.
func (c *clientLogs) set(ctx context.Context, want map[string][]gpu.UUID) {
	c.wanted = want
	for path, f := range c.running {
		if _, ok := want[path]; !ok {
			f.cancel()
			delete(c.running, path)
		}
	}
	for _, path := range slices.Sorted(maps.Keys(want)) {
		if _, ok := c.running[path]; ok {
			continue
		}
		fctx, cancel := context.WithCancel(ctx)
		f := &followedLog{cl: mps.NewClientLog(path, c.log.With("component", "accounting")), cancel: cancel}
		f.cl.Watch(c.guard)
		f.cl.OnChange(func() {
			select {
			case c.changed <- struct{}{}:
			default: // one is pending already
			}
		})
		c.running[path] = f
		c.wg.Go(func() {
			f.cl.Follow(fctx, func(ctx context.Context, l mps.Lines) error {
				select {
				case c.out <- logBatch{path: path, lines: l.Clients, active: l.Active, foreign: l.Foreign}:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
		})
	}
}

// states are how the followers fare, by path.
func (c *clientLogs) states() map[string]mps.ClientLogState {
	out := make(map[string]mps.ClientLogState, len(c.running))
	for path, f := range c.running {
		out[path] = f.cl.State()
	}
	return out
}

// stop ends every follower and waits for them.
func (c *clientLogs) stop() {
	for _, f := range c.running {
		f.cancel()
	}
	c.wg.Wait()
}
