package server

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"
)

// clientErrorWindow is how often at most the summary of the client's
// errors is written.
const clientErrorWindow = time.Minute

// clientErrors counts the client's errors (4xx but 401 and 403) by route
// and status between two summary lines; safe for concurrent use. The first
// one after a quiet window is written at once; those that follow within
// the window are counted and written as one line, by the first client
// error after the window ends. Every one is also in the request metrics
// (by route and status) and, at debug, in its own request line.
type clientErrors struct {
	mu     sync.Mutex
	since  time.Time      // the window's start; zero before the first
	counts map[string]int // "route status" -> requests in this window
}

func (c *clientErrors) add(ctx context.Context, log *slog.Logger, route string, status int, now time.Time) {
	c.mu.Lock()
	key := fmt.Sprintf("%s %d", route, status)
	if !c.since.IsZero() && now.Sub(c.since) < clientErrorWindow {
		if c.counts == nil {
			c.counts = map[string]int{}
		}
		c.counts[key]++
		c.mu.Unlock()
		return
	}
	counts, since := c.counts, c.since
	c.since, c.counts = now, nil
	c.mu.Unlock()
	if len(counts) > 0 {
		total := 0
		parts := make([]string, 0, len(counts))
		for k, n := range counts {
			total += n
			parts = append(parts, fmt.Sprintf("%s: %d", k, n))
		}
		sort.Strings(parts)
		log.LogAttrs(ctx, slog.LevelInfo, "client errors answered",
			slog.Int("requests", total), slog.Time("since", since), slog.String("by_route", strings.Join(parts, ", ")))
	}
	log.LogAttrs(ctx, slog.LevelInfo, "client error answered (more within a minute are summed up in one line)",
		slog.String("route", route), slog.Int("status", status))
}
