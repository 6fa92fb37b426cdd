package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The token cache's upkeep (tokencache.go): one goroutine per Store,
// started by Open and stopped by Close, that reads the revocation log
// (migration 0012) every tokenCheckEvery, dropping the entries of what
// another process revoked, and writes the tokens' uses as last_used_at
// every tokenFlushEvery. Requests never wait for it; when it cannot read
// the log, the cache stops answering (TokenCacheTTL after its last
// reading) and every request reads its token from the database again.

const (
	// tokenCheckEvery is how often the revocation log is read: well
	// within TokenCacheTTL, so that the cache keeps answering between two
	// readings.
	tokenCheckEvery = TokenCacheTTL / 4
	// tokenFlushEvery is how often the uses noted in the cache are
	// written as last_used_at.
	tokenFlushEvery = 10 * time.Second
	// revocationsKept is how long the log keeps a revocation (migrations
	// 0012: an hour). A cache that has not read it for half of that
	// forgets everything it holds.
	revocationsKept = time.Hour
	// upkeepTimeout bounds each reading and each write of the upkeep.
	upkeepTimeout = 5 * time.Second
	// maxUsesPerStatement bounds the ids of one last_used_at UPDATE.
	maxUsesPerStatement = 500
)

// upkeep is the running upkeep goroutine.
type upkeep struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startUpkeep starts the upkeep of s's token cache.
func (s *Store) startUpkeep() {
	ctx, cancel := context.WithCancel(context.Background())
	u := &upkeep{cancel: cancel, done: make(chan struct{})}
	s.upkeep = u
	go func() {
		defer close(u.done)
		s.runUpkeep(ctx)
	}()
}

// stopUpkeep stops it, after a last write of the tokens' uses; it may be
// called more than once.
func (s *Store) stopUpkeep() {
	if s.upkeep != nil {
		s.upkeep.cancel()
		<-s.upkeep.done
	}
}

func (s *Store) runUpkeep(ctx context.Context) {
	check := time.NewTicker(tokenCheckEvery)
	defer check.Stop()
	failing := false
	checkLog := func() {
		err := s.checkRevocations(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
		case err != nil && !failing:
			failing = true
			s.log.Warn("reading the token revocation log; every request reads its token from the database until it can be read again", "error", err)
		case err == nil && failing:
			failing = false
			s.log.Info("token revocation log read again; cached tokens answer again")
		}
	}
	checkLog()
	lastFlush := time.Now()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), upkeepTimeout)
			s.flushTokenUses(fctx)
			cancel()
			return
		case <-check.C:
			checkLog()
			if time.Since(lastFlush) >= tokenFlushEvery {
				s.flushTokenUses(ctx)
				lastFlush = time.Now()
			}
		}
	}
}

// checkRevocations reads the revocations logged since the last reading
// and drops their tokens' entries; the cache answers for TokenCacheTTL
// from when it began. The first reading, or one after a long gap, starts
// from the log's end and forgets every entry.
func (s *Store) checkRevocations(ctx context.Context) error {
	s.revocationsMu.Lock()
	defer s.revocationsMu.Unlock()
	return s.checkRevocationsLocked(ctx)
}

// freshenTokens reads the revocation log when the cache's last reading
// began TokenCacheTTL ago or more (the upkeep late: a machine too busy to
// run it on time) and the cache holds key: the request that finds it so
// reads the log for itself and every request waiting meanwhile, instead
// of each reading its token. It says whether the cache answers again.
func (s *Store) freshenTokens(ctx context.Context, key tokenKey) bool {
	if !s.tokens.stale(s.now()) || !s.tokens.holds(key, s.now()) {
		return false
	}
	s.revocationsMu.Lock()
	defer s.revocationsMu.Unlock()
	if s.tokens.stale(s.now()) { // not read by another meanwhile
		if err := s.checkRevocationsLocked(ctx); err != nil {
			s.log.Debug("reading the token revocation log for a request", "error", err)
			return false
		}
	}
	return true
}

func (s *Store) checkRevocationsLocked(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, upkeepTimeout)
	defer cancel()
	start := s.now()
	last, seq := s.tokens.lastCheck()
	if last.IsZero() || start.Sub(last) > revocationsKept/2 {
		var end int64
		if err := s.prep(s.db).QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM token_revocations`).Scan(&end); err != nil {
			return fmt.Errorf("reading the end of the token revocation log: %w", err)
		}
		s.tokens.checked(start, end, true)
		return nil
	}
	rows, err := s.prep(s.db).QueryContext(ctx, s.d.bind(`SELECT seq, token_id FROM token_revocations WHERE seq > ? ORDER BY seq`), seq)
	if err != nil {
		return fmt.Errorf("reading the token revocation log: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&seq, &id); err != nil {
			return fmt.Errorf("reading the token revocation log: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading the token revocation log: %w", err)
	}
	if len(ids) > 0 {
		s.tokens.revoke(ids...)
	}
	s.tokens.checked(start, seq, false)
	return nil
}

// flushTokenUses writes the uses the cache noted as the tokens'
// last_used_at, to the second, in one transaction: a statement per second
// of use (and per maxUsesPerStatement tokens), each writing a token only
// where the database holds a use a minute older at least (another
// process may have written it meanwhile). A failure is logged: it loses
// those uses, never a request.
func (s *Store) flushTokenUses(ctx context.Context) {
	uses := s.tokens.uses()
	if len(uses) == 0 {
		return
	}
	bySecond := map[time.Time][]string{}
	for _, u := range uses {
		at := u.at.UTC().Truncate(time.Second)
		bySecond[at] = append(bySecond[at], u.id)
	}
	ctx, cancel := context.WithTimeout(ctx, upkeepTimeout)
	defer cancel()
	err := s.inTx(ctx, false, func(tx *sql.Tx) error {
		for at, ids := range bySecond {
			slices.Sort(ids) // rows locked in one order by every writer
			for chunk := range slices.Chunk(ids, maxUsesPerStatement) {
				args := []any{formatTime(at)}
				for _, id := range chunk {
					args = append(args, id)
				}
				args = append(args, formatTime(at.Add(-lastUsedEvery)))
				q := `UPDATE api_tokens SET last_used_at = ? WHERE id IN (` + strings.TrimSuffix(strings.Repeat("?, ", len(chunk)), ", ") +
					`) AND (last_used_at IS NULL OR last_used_at < ?)`
				if _, err := tx.ExecContext(ctx, s.d.bind(q), args...); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		s.log.Warn("recording the tokens' last use", "tokens", len(uses), "error", err)
	}
}
