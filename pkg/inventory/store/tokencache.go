package store

import (
	"crypto/sha256"
	"slices"
	"sync"
	"time"
)

// The token cache. Every API request presents a token, and reading it from
// the database was a round trip per request on PostgreSQL and about 8% of
// a request's CPU on SQLite (docs/benchmarks.md, issue 22); at 100,000
// hosts, each with its own token and syncing every 30 s, the read and its
// last_used_at write added 30-50% to a sync's p99 (issue 41).
// VerifyToken and VerifyKeystoneToken therefore remember the tokens they
// found valid:
//
//   - keyed by the SHA-256 of the whole token presented, never the token;
//     only a valid token is kept (a wrong or unknown one always goes to the
//     database, so refusals cost what they did and the cache cannot be
//     filled by guessing), and a hit needs the same token again;
//   - for as long as nothing revokes it (at most tokenCacheMaxAge; a
//     keystone token's entry never outlives its expiry). Revocations are
//     learned from the database's log of them (migration 0012, which any
//     writer's delete or change of a token appends to), which the Store's
//     upkeep reads every tokenCheckEvery (tokens_upkeep.go): the entries of
//     a revoked token go. The cache answers only while the last reading of
//     the log that succeeded began less than TokenCacheTTL ago, so a
//     revocation made by another process (`mps-inventory token revoke`,
//     another inventory on the same database) applies at most
//     TokenCacheTTL after it committed; when the log cannot be read, every
//     request reads its token again, as without a cache;
//   - a revocation through this Store (RevokeToken, RevokeKeystoneToken)
//     drops its entries before it returns. A verification that read the
//     token before a revocation does not put it back (gen);
//   - last_used_at: each use is noted in the entry, and the upkeep writes
//     the uses of the last minute in a few statements every
//     tokenFlushEvery, at most once a minute per token, as before.

// TokenCacheTTL bounds how late a revocation made through another process
// (another mps-inventory on the same PostgreSQL database, or
// `mps-inventory token revoke`) applies here: a cached token is answered
// only while the last reading of the revocation log began less than
// TokenCacheTTL ago. A revocation through this process applies at once.
const TokenCacheTTL = time.Second

// tokenCacheMaxAge is the longest an entry of an API token lives, revoked
// or not: the log is what ends an entry early, this is a backstop.
const tokenCacheMaxAge = 10 * time.Minute

// entryLifetime is how long key's entry lives: between half of
// tokenCacheMaxAge and all of it, by the key's first byte. A fleet's tokens
// are cached together (every host's first sync after an inventory starts)
// and would otherwise all go back to the database within the same minute
// ten minutes later (docs/benchmarks.md, "100,000 hosts' syncs"); spread
// by their keys, which differ at random, their reads again are spread over
// five minutes, and drift apart from then on.
func entryLifetime(key tokenKey) time.Duration {
	return tokenCacheMaxAge/2 + time.Duration(key[0])*(tokenCacheMaxAge/2)/256
}

// maxCachedTokens bounds the cache: the live tokens of a cluster of
// 100,000 hosts (one each) and their keystone sessions, about 300 bytes an
// entry. When it is full, expired entries go (a sweep at most once per
// TokenCacheTTL); if none has, the new one is not kept.
const maxCachedTokens = 1 << 18

type tokenKey [sha256.Size]byte

// cachedToken is a verified token: the API token, and for a keystone token
// the keystone token too (keystone set).
type cachedToken struct {
	api      Token
	keystone KeystoneToken
	until    time.Time
	// usedAt is the last use answered; the upkeep writes it as the API
	// token's last_used_at (api.LastUsedAt is what the database holds).
	usedAt time.Time
}

type tokenCache struct {
	mu      sync.Mutex
	entries map[tokenKey]*cachedToken
	// gen counts the revocations; a verification keeps its result only if
	// none happened since it began to read (see begin and put).
	gen uint64
	// checkedAt is when the last reading of the revocation log that
	// succeeded began; zero before the first. revSeq is the last
	// revocation read from the log.
	checkedAt time.Time
	revSeq    int64
	lastSweep time.Time
}

func newTokenCache() *tokenCache {
	return &tokenCache{entries: map[tokenKey]*cachedToken{}}
}

func tokenCacheKey(presented string) tokenKey { return sha256.Sum256([]byte(presented)) }

// get returns the entry of key if it is still good at now, noting the use.
func (c *tokenCache) get(key tokenKey, now time.Time) (cachedToken, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.checkedAt) >= TokenCacheTTL {
		return cachedToken{}, false
	}
	e, ok := c.entries[key]
	if !ok {
		return cachedToken{}, false
	}
	if !now.Before(e.until) {
		delete(c.entries, key)
		return cachedToken{}, false
	}
	e.usedAt = now
	return *e, true
}

// stale says whether the cache's last reading of the revocation log began
// TokenCacheTTL ago or more: then it answers nothing.
func (c *tokenCache) stale(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return now.Sub(c.checkedAt) >= TokenCacheTTL
}

// holds says whether key has an entry still good at now.
func (c *tokenCache) holds(key tokenKey, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	return ok && now.Before(e.until)
}

// begin is called before a verification reads the database; its result
// goes to put.
func (c *tokenCache) begin() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// put keeps e under key unless a revocation happened since begin returned
// gen; false when it did not keep it.
func (c *tokenCache) put(key tokenKey, e cachedToken, gen uint64, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return false
	}
	if _, replaces := c.entries[key]; !replaces && len(c.entries) >= maxCachedTokens {
		if now.Sub(c.lastSweep) < TokenCacheTTL {
			return false
		}
		c.lastSweep = now
		for k, old := range c.entries {
			if !now.Before(old.until) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= maxCachedTokens {
			return false
		}
	}
	c.entries[key] = &e
	return true
}

// revoke forgets the entries of the tokens ids name (API tokens, with
// every keystone token acting for them, or keystone tokens), and keeps a
// verification under way from putting one back.
func (c *tokenCache) revoke(ids ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for k, e := range c.entries {
		if slices.Contains(ids, e.api.ID) || (e.keystone.ID != "" && slices.Contains(ids, e.keystone.ID)) {
			delete(c.entries, k)
		}
	}
}

// checked records a reading of the revocation log that began at start and
// saw it up to seq, after revoke was given what it held; clear forgets
// every entry first (the log's start is not known to hold what this
// cache may have missed).
func (c *tokenCache) checked(start time.Time, seq int64, clear bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if clear {
		c.gen++
		c.entries = map[tokenKey]*cachedToken{}
	}
	c.checkedAt, c.revSeq = start, seq
}

// lastCheck is checked's last start and seq.
func (c *tokenCache) lastCheck() (time.Time, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checkedAt, c.revSeq
}

// tokenUse is an API token's use the database does not hold yet.
type tokenUse struct {
	id string
	at time.Time
}

// uses lists the API tokens used at least lastUsedEvery after the
// last_used_at the database holds (or used and never recorded), and takes
// them as recorded: the upkeep writes them (tokens_upkeep.go).
func (c *tokenCache) uses() []tokenUse {
	c.mu.Lock()
	defer c.mu.Unlock()
	latest := map[string]time.Time{}
	for _, e := range c.entries {
		if e.usedAt.IsZero() || (!e.api.LastUsedAt.IsZero() && e.usedAt.Sub(e.api.LastUsedAt) < lastUsedEvery) {
			continue
		}
		if e.usedAt.After(latest[e.api.ID]) {
			latest[e.api.ID] = e.usedAt
		}
	}
	out := make([]tokenUse, 0, len(latest))
	for id, at := range latest {
		out = append(out, tokenUse{id, at})
	}
	// Every entry of the token (its keystone tokens' too) takes the use
	// as recorded.
	for _, e := range c.entries {
		if at, ok := latest[e.api.ID]; ok && at.After(e.api.LastUsedAt) {
			e.api.LastUsedAt = at
		}
	}
	return out
}
