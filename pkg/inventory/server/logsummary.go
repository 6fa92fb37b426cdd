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

// Requests that fail by the thousand (a fleet whose token was rotated, a
// scheduler retrying refused attaches) must not write a line each, and
// what they are must still be visible, on time. A summary counts one kind
// of failure by key (a token, a host, a remote address): the first of a
// key is written at once, in full; the others are counted, and when the
// key's window (summaryWindow) ends the ticker (Server.Run, every
// summaryTick) writes one line with the count, by route and status. A key
// quiet for a whole window is forgotten, so that its next failure is
// written at once again. Every request is also in the request metrics and,
// at debug, in its own request line.

const (
	// summaryWindow is how often at most a key's summary line is written.
	summaryWindow = time.Minute
	// summaryTick is how often the ticker looks for windows that ended: a
	// summary is written at most this late.
	summaryTick = time.Second
	// maxSummaryKeys bounds the keys of one summary (tokens and addresses
	// are the client's to choose); past it, failures of new keys are
	// counted under one key, otherKey.
	maxSummaryKeys = 256
	otherKey       = "(other keys)"
)

// summary counts one kind of failure by key; safe for concurrent use.
type summary struct {
	// level and summed are the summary line's; what is summed (the
	// count's name, the details' name) is countName and byName.
	level             slog.Level
	summed            string
	countName, byName string
	mu                sync.Mutex
	keys              map[string]*summaryKey
}

type summaryKey struct {
	attrs []slog.Attr // what the key is, written on its lines
	since time.Time   // the window's start
	n     int         // failures counted in the window
	by    map[string]int
}

// add counts a failure of key (described by attrs) with its detail (route
// and status) at now; first is true when it opens the key's window: the
// caller writes that one at once. A window found over twice its length
// (no ticker runs: Run) has its summary written here.
func (s *summary) add(ctx context.Context, log *slog.Logger, now time.Time, key string, attrs []slog.Attr, detail string) (first bool) {
	s.mu.Lock()
	if s.keys == nil {
		s.keys = map[string]*summaryKey{}
	}
	k, ok := s.keys[key]
	if !ok && len(s.keys) >= maxSummaryKeys {
		key, attrs = otherKey, []slog.Attr{slog.String("keys", fmt.Sprintf("more than %d at once", maxSummaryKeys))}
		k, ok = s.keys[key]
	}
	if !ok {
		s.keys[key] = &summaryKey{attrs: attrs, since: now}
		s.mu.Unlock()
		return true
	}
	var overdue *summaryKey
	if now.Sub(k.since) >= 2*summaryWindow && k.n > 0 {
		c := *k
		overdue = &c
		k.since, k.n, k.by = now, 0, nil
	}
	k.n++
	if k.by == nil {
		k.by = map[string]int{}
	}
	k.by[detail]++
	s.mu.Unlock()
	if overdue != nil {
		s.write(ctx, log, overdue)
	}
	return false
}

// flush writes the summary of every key whose window ended by now, and
// forgets the keys that were quiet for a whole window.
func (s *summary) flush(ctx context.Context, log *slog.Logger, now time.Time) {
	var due []summaryKey
	s.mu.Lock()
	for key, k := range s.keys {
		if now.Sub(k.since) < summaryWindow {
			continue
		}
		if k.n == 0 {
			delete(s.keys, key)
			continue
		}
		due = append(due, *k)
		k.since, k.n, k.by = now, 0, nil
	}
	s.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].since.Before(due[j].since) })
	for i := range due {
		s.write(ctx, log, &due[i])
	}
}

func (s *summary) write(ctx context.Context, log *slog.Logger, k *summaryKey) {
	parts := make([]string, 0, len(k.by))
	for d, n := range k.by {
		parts = append(parts, fmt.Sprintf("%s: %d", d, n))
	}
	sort.Strings(parts)
	attrs := append(append([]slog.Attr{}, k.attrs...),
		slog.Int(s.countName, k.n), slog.Time("since", k.since), slog.String(s.byName, strings.Join(parts, ", ")))
	log.LogAttrs(ctx, s.level, s.summed, attrs...)
}

// summaries are the server's: refused credentials (401), forbidden calls
// (403), and the client's other errors (4xx).
type summaries struct {
	refused, forbidden, clientErrors summary
}

func newSummaries() *summaries {
	return &summaries{
		refused: summary{level: slog.LevelWarn, summed: "refused credentials (summary of the window)",
			countName: "requests", byName: "by_route"},
		forbidden: summary{level: slog.LevelWarn, summed: "forbidden requests (summary of the window)",
			countName: "requests", byName: "by_route"},
		clientErrors: summary{level: slog.LevelInfo, summed: "client errors answered",
			countName: "requests", byName: "by_route"},
	}
}

func (s *summaries) flush(ctx context.Context, log *slog.Logger, now time.Time) {
	s.refused.flush(ctx, log, now)
	s.forbidden.flush(ctx, log, now)
	s.clientErrors.flush(ctx, log, now)
}
