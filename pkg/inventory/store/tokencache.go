package store

import (
	"crypto/sha256"
	"sync"
	"time"
)

// The token cache. Every API request presents a token, and reading it from
// the database was a round trip per request on PostgreSQL (two of an
// attach and detach's eight) and about 8% of a request's CPU on SQLite
// (docs/benchmarks.md, issue 22). VerifyToken and VerifyKeystoneToken
// therefore remember, for TokenCacheTTL, the tokens they found valid:
//
//   - keyed by the SHA-256 of the whole token presented, never the token;
//     only a valid token is kept (a wrong or unknown one always goes to the
//     database, so refusals cost what they did and the cache cannot be
//     filled by guessing), and a hit needs the same token again;
//   - a revocation through this Store (RevokeToken, RevokeKeystoneToken:
//     the server's DELETE /v3/auth/tokens, the admin token file's
//     bootstrap) empties the cache before it returns, so this process
//     refuses the token from the next request on. A verification that read
//     the token before the revocation does not put it back (gen);
//   - a revocation made by another process (`mps-inventory token revoke`
//     on the same SQLite file, another inventory on the same PostgreSQL
//     database) is seen when the entry ends: at most TokenCacheTTL later.
//     That is the price of the cache, and TokenCacheTTL its bound;
//   - a keystone token's entry never outlives its expiry;
//   - last_used_at is written on the reads the cache lets through, which
//     still happen once per TokenCacheTTL: it is kept to the minute anyway.

// TokenCacheTTL is how long a validated token is taken as valid without
// reading the database again: the longest a revocation made through another
// process (another mps-inventory on the same PostgreSQL database, or
// `mps-inventory token revoke`) takes to refuse a token that this process
// has just seen. A revocation through this process applies at once.
const TokenCacheTTL = time.Second

// maxCachedTokens bounds the cache: far more than the live tokens of a
// cluster (one per host, a few for people and keystone sessions). When it
// is full, expired entries go; if none has, the new one is not kept.
const maxCachedTokens = 4096

type tokenKey [sha256.Size]byte

// cachedToken is a verified token: the API token, and for a keystone token
// the keystone token too (keystone set).
type cachedToken struct {
	api      Token
	keystone KeystoneToken
	until    time.Time
}

type tokenCache struct {
	mu      sync.Mutex
	entries map[tokenKey]cachedToken
	// gen counts the revocations; a verification keeps its result only if
	// none happened since it began to read (see begin and put).
	gen uint64
}

func newTokenCache() *tokenCache {
	return &tokenCache{entries: map[tokenKey]cachedToken{}}
}

func tokenCacheKey(presented string) tokenKey { return sha256.Sum256([]byte(presented)) }

// get returns the entry of key if it is still good at now.
func (c *tokenCache) get(key tokenKey, now time.Time) (cachedToken, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return cachedToken{}, false
	}
	if !now.Before(e.until) {
		delete(c.entries, key)
		return cachedToken{}, false
	}
	return e, true
}

// begin is called before a verification reads the database; its result
// goes to put.
func (c *tokenCache) begin() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// put keeps e under key unless a revocation happened since begin returned
// gen.
func (c *tokenCache) put(key tokenKey, e cachedToken, gen uint64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if len(c.entries) >= maxCachedTokens {
		for k, old := range c.entries {
			if !now.Before(old.until) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= maxCachedTokens {
			return
		}
	}
	c.entries[key] = e
}

// revoked forgets every entry: a revocation's keystone tokens are not
// known by key, and revocations are rare.
func (c *tokenCache) revoked() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.entries)
}
