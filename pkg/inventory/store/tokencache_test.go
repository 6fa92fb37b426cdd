package store

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A revocation through the Store that verified a token applies at once,
// cache or not: to the API token, to a keystone token, and to the keystone
// tokens of a revoked API token.
func TestTokenCacheRevokedHere(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		s := open()
		ctx := t.Context()
		whole, tok := mustToken(t, s, NewToken{Role: RoleAdmin})
		ks, _, err := s.CreateKeystoneToken(ctx, tok.ID, "system", []string{"password"}, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		ks2, _, err := s.CreateKeystoneToken(ctx, tok.ID, "system", []string{"password"}, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{whole, ks, ks2} {
			if _, err := verifyAny(t, s, v); err != nil {
				t.Fatalf("verifying a new token: %v", err)
			}
		}
		if err := s.RevokeKeystoneToken(ctx, ks); err != nil {
			t.Fatal(err)
		}
		if _, err := s.VerifyKeystoneToken(ctx, ks); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("revoked keystone token verified: %v", err)
		}
		if _, err := s.VerifyKeystoneToken(ctx, ks2); err != nil {
			t.Errorf("revoking one keystone token broke another: %v", err)
		}
		if err := s.RevokeToken(ctx, tok.ID); err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{whole, ks2} {
			if _, err := verifyAny(t, s, v); !errors.Is(err, ErrInvalidToken) {
				t.Errorf("%s... of a revoked API token verified: %v", v[:5], err)
			}
		}
	})
}

// manualUpkeep stops s's token upkeep, so that the test reads the
// revocation log and writes the uses itself (checkRevocations,
// flushTokenUses) at the times of its own clock, which it may then set.
// The log has been read once when it returns (the first reading, which
// starts from the log's end).
func manualUpkeep(t *testing.T, s *Store) {
	t.Helper()
	s.stopUpkeep()
	if err := s.checkRevocations(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A revocation through another process's Store (a second pool on the same
// database) reaches this one by the revocation log: at the first reading
// after it, and at the latest TokenCacheTTL after it, by this Store's
// clock, when no reading succeeded since (the cache then stops answering).
func TestTokenCacheRevokedElsewhere(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		here, there := open(), open()
		ctx := t.Context()
		manualUpkeep(t, here)
		clock := time.Now()
		here.now = func() time.Time { return clock }
		whole, tok := mustToken(t, here, NewToken{Role: RoleViewer})
		ks, _, err := here.CreateKeystoneToken(ctx, tok.ID, "system", []string{"password"}, clock.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		other, otherTok := mustToken(t, here, NewToken{Role: RoleViewer})
		ks2, _, err := here.CreateKeystoneToken(ctx, otherTok.ID, "system", []string{"token"}, clock.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if err := here.checkRevocations(ctx); err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{whole, ks, other, ks2} {
			if _, err := verifyAny(t, here, v); err != nil {
				t.Fatalf("verifying a new token: %v", err)
			}
		}
		if err := there.RevokeToken(ctx, tok.ID); err != nil {
			t.Fatal(err)
		}
		if err := there.RevokeKeystoneToken(ctx, ks2); err != nil {
			t.Fatal(err)
		}
		// The other process refuses them at once.
		for _, v := range []string{whole, ks, ks2} {
			if _, err := verifyAny(t, there, v); !errors.Is(err, ErrInvalidToken) {
				t.Errorf("%s... verified where it was revoked: %v", v[:5], err)
			}
		}
		// This one, without reading the log since: still taken just before
		// TokenCacheTTL (what the cache costs), refused from then on.
		clock = clock.Add(TokenCacheTTL - time.Millisecond)
		for _, v := range []string{whole, ks, ks2} {
			if _, err := verifyAny(t, here, v); err != nil {
				t.Errorf("%s... refused before TokenCacheTTL: the cache did not answer (%v)", v[:5], err)
			}
		}
		clock = clock.Add(time.Millisecond)
		for _, v := range []string{whole, ks, ks2} {
			if _, err := verifyAny(t, here, v); !errors.Is(err, ErrInvalidToken) {
				t.Errorf("%s... revoked elsewhere still verified after TokenCacheTTL: %v", v[:5], err)
			}
		}
		if _, err := verifyAny(t, here, other); err != nil {
			t.Errorf("a token nobody revoked: %v", err)
		}

		// With the log read, the cache answers again, for as long as the
		// readings go on, and a revocation applies at the next one.
		if err := here.checkRevocations(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			clock = clock.Add(TokenCacheTTL / 2)
			if err := here.checkRevocations(ctx); err != nil {
				t.Fatal(err)
			}
			if _, ok := here.tokens.get(tokenCacheKey(other), clock); !ok {
				t.Errorf("reading %d: the cache no longer answers a token nobody revoked", i)
			}
		}
		if err := there.RevokeToken(ctx, otherTok.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := verifyAny(t, here, other); err != nil {
			t.Errorf("revoked elsewhere and not read yet: the cache did not answer (%v)", err)
		}
		clock = clock.Add(time.Millisecond)
		if err := here.checkRevocations(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := verifyAny(t, here, other); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("revoked elsewhere, and read from the log: still verified: %v", err)
		}
	})
}

// A token's entry lives as long as nothing revokes it, much longer than
// TokenCacheTTL: a host that syncs every 30 s finds its token cached, also
// when the upkeep fell behind.
func TestTokenCacheOutlivesTheTTL(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		s := open()
		ctx := t.Context()
		manualUpkeep(t, s)
		clock := time.Now()
		s.now = func() time.Time { return clock }
		whole, tok := mustToken(t, s, NewToken{Role: RoleHost, Host: "gpu-1"})
		if err := s.checkRevocations(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.VerifyToken(ctx, whole); err != nil {
			t.Fatal(err)
		}
		// Its row goes without the log hearing of it (as no writer can:
		// the point is only to see who answers).
		if _, err := s.db.ExecContext(ctx, `DROP TRIGGER api_tokens_revoked`+map[bool]string{true: ` ON api_tokens`}[s.d.name == "postgres"]); err != nil {
			t.Fatal(err)
		}
		if _, err := s.db.ExecContext(ctx, s.d.bind(`DELETE FROM api_tokens WHERE id = ?`), tok.ID); err != nil {
			t.Fatal(err)
		}
		// 30 s later, the upkeep not having run (a machine too busy): the
		// request reads the revocation log itself, and the cache answers.
		clock = clock.Add(30 * time.Second)
		if _, err := s.VerifyToken(ctx, whole); err != nil {
			t.Errorf("30 s later the cache did not answer: %v", err)
		}
		if last, _ := s.tokens.lastCheck(); !last.Equal(clock) {
			t.Errorf("the request did not read the revocation log (last reading %v)", last)
		}
		clock = clock.Add(tokenCacheMaxAge)
		if err := s.checkRevocations(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.VerifyToken(ctx, whole); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("after tokenCacheMaxAge the cache still answered: %v", err)
		}
	})
}

// Only what the database found valid is cached, under the hash of the whole
// token: a wrong secret or an unknown id next to a cached token is refused;
// a keystone token's entry ends with the token.
func TestTokenCacheKeepsOnlyValid(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		s := open()
		ctx := t.Context()
		manualUpkeep(t, s)
		clock := time.Now()
		s.now = func() time.Time { return clock }
		whole, tok := mustToken(t, s, NewToken{Role: RoleAdmin})
		ks, _, err := s.CreateKeystoneToken(ctx, tok.ID, "system", []string{"password"}, clock.Add(TokenCacheTTL/2))
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{whole, ks} {
			if _, err := verifyAny(t, s, v); err != nil {
				t.Fatal(err)
			}
		}
		last := whole[len(whole)-1]
		wrong := whole[:len(whole)-1] + map[bool]string{true: "1", false: "0"}[last == '0']
		unknown := "mpsi_" + strings.Repeat("f", 16) + whole[len("mpsi_")+16:]
		for _, v := range []string{wrong, unknown, strings.ToUpper(whole), whole + " "} {
			if _, err := s.VerifyToken(ctx, v); !errors.Is(err, ErrInvalidToken) {
				t.Errorf("VerifyToken(%q) = %v, want ErrInvalidToken", v, err)
			}
		}
		if n := len(s.tokens.entries); n != 2 {
			t.Errorf("%d cached tokens, want the 2 valid ones", n)
		}
		for k := range s.tokens.entries {
			if strings.Contains(string(k[:]), whole) || strings.Contains(string(k[:]), ks) {
				t.Fatal("a cache key holds the token")
			}
		}
		clock = clock.Add(TokenCacheTTL / 2)
		if err := s.checkRevocations(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := s.tokens.get(tokenCacheKey(whole), clock); !ok {
			t.Error("the API token's entry is gone")
		}
		if _, err := s.VerifyKeystoneToken(ctx, ks); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("expired keystone token verified: %v", err)
		}
		if _, err := s.VerifyToken(ctx, whole); err != nil {
			t.Errorf("API token: %v", err)
		}
	})
}

// A verification that read the token before a revocation does not put it
// back in the cache after the revocation emptied it.
func TestTokenCacheRevocationDuringRead(t *testing.T) {
	c := newTokenCache()
	now := time.Now()
	key := tokenCacheKey("mpsi_x")
	c.checked(now, 0, false)
	gen := c.begin() // the read starts
	c.revoke("x")    // a revocation commits and drops the token's entries
	c.put(key, cachedToken{until: now.Add(TokenCacheTTL)}, gen, now)
	if _, ok := c.get(key, now); ok {
		t.Fatal("a read from before the revocation was cached after it")
	}
	c.put(key, cachedToken{until: now.Add(TokenCacheTTL)}, c.begin(), now)
	if _, ok := c.get(key, now); !ok {
		t.Fatal("a read after the revocation was not cached")
	}
}

// The cache holds at most maxCachedTokens entries; expired ones make room,
// found by a sweep at most once per TokenCacheTTL.
func TestTokenCacheBounded(t *testing.T) {
	c := newTokenCache()
	now := time.Now()
	put := func(i int, until time.Time) {
		c.put(tokenCacheKey(strconv.Itoa(i)), cachedToken{until: until}, c.begin(), now)
	}
	for i := range maxCachedTokens {
		put(i, now.Add(time.Duration(i%2)*TokenCacheTTL)) // every other one expired
	}
	put(maxCachedTokens, now.Add(TokenCacheTTL))
	if n := len(c.entries); n != maxCachedTokens/2+1 {
		t.Errorf("%d entries after a put into a full cache, want the %d live ones and the new one", n, maxCachedTokens/2)
	}
	for i := range maxCachedTokens {
		put(maxCachedTokens+1+i, now.Add(TokenCacheTTL))
	}
	if n := len(c.entries); n != maxCachedTokens {
		t.Errorf("%d entries, want at most %d", n, maxCachedTokens)
	}
	now = now.Add(TokenCacheTTL) // every entry expired, a sweep due
	put(2*maxCachedTokens+1, now.Add(TokenCacheTTL))
	if n := len(c.entries); n != 1 {
		t.Errorf("%d entries after a sweep of expired ones, want the new one", n)
	}
}

// verifyAny verifies an API or a keystone token.
func verifyAny(t *testing.T, s *Store, token string) (Token, error) {
	t.Helper()
	if IsKeystoneToken(token) {
		kt, err := s.VerifyKeystoneToken(t.Context(), token)
		return kt.API, err
	}
	return s.VerifyToken(t.Context(), token)
}

// A fleet's tokens cached at once do not all go back to the database at
// once: their entries end between half of tokenCacheMaxAge and all of it,
// spread by their keys, so an inventory serving 100,000 hosts does not
// read every token again within the same minute.
func TestTokenCacheEntriesEndSpread(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		s := open()
		ctx := t.Context()
		manualUpkeep(t, s)
		start := time.Now()
		s.now = func() time.Time { return start }
		if err := s.checkRevocations(ctx); err != nil {
			t.Fatal(err)
		}
		const hosts = 64
		keys := make([]tokenKey, hosts)
		for i := range hosts {
			whole, _ := mustToken(t, s, NewToken{Role: RoleHost, Host: "gpu-" + strconv.Itoa(i)})
			if _, err := s.VerifyToken(ctx, whole); err != nil {
				t.Fatal(err)
			}
			keys[i] = tokenCacheKey(whole)
		}
		held := func(after time.Duration) int {
			n := 0
			for _, k := range keys {
				if s.tokens.holds(k, start.Add(after)) {
					n++
				}
			}
			return n
		}
		if n := held(tokenCacheMaxAge/2 - time.Second); n != hosts {
			t.Errorf("%d of %d entries held just before half of tokenCacheMaxAge, want all", n, hosts)
		}
		if n := held(tokenCacheMaxAge * 3 / 4); n == 0 || n == hosts {
			t.Errorf("%d of %d entries held at three quarters of tokenCacheMaxAge: they end together", n, hosts)
		}
		if n := held(tokenCacheMaxAge); n != 0 {
			t.Errorf("%d entries outlive tokenCacheMaxAge", n)
		}
	})
}
