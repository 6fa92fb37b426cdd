package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var tokenFormat = regexp.MustCompile(`^mpsi_[0-9a-f]{16}_[0-9a-f]{64}$`)

func mustToken(t *testing.T, s *Store, nt NewToken) (string, Token) {
	t.Helper()
	secret, tok, err := s.CreateToken(t.Context(), nt)
	if err != nil {
		t.Fatalf("CreateToken %+v: %v", nt, err)
	}
	return secret, tok
}

func TestCreateAndVerifyToken(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		s := open()
		for _, nt := range []NewToken{
			{Name: "ops", Role: RoleAdmin},
			{Name: "agent gpu-1", Role: RoleHost, Host: "gpu-1"},
			{Role: RoleViewer},
		} {
			t.Run(string(nt.Role), func(t *testing.T) {
				whole, created := mustToken(t, s, nt)
				if !tokenFormat.MatchString(whole) || !strings.Contains(whole, "_"+created.ID+"_") {
					t.Fatalf("token %q (id %s) is not mpsi_<id>_<secret>", whole, created.ID)
				}
				got, err := s.VerifyToken(t.Context(), whole)
				if err != nil {
					t.Fatalf("VerifyToken: %v", err)
				}
				if got.ID != created.ID || got.Role != nt.Role || got.Host != nt.Host || got.Name != nt.Name ||
					!got.CreatedAt.Equal(created.CreatedAt) || got.LastUsedAt.IsZero() {
					t.Errorf("verified %+v, created %+v", got, created)
				}
			})
		}
	})
}

func TestVerifyTokenRefusals(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		s := open()
		whole, tok := mustToken(t, s, NewToken{Role: RoleAdmin})
		secret := whole[len(whole)-64:]
		other := strings.Repeat("a", 16)
		flip := func(c byte) string {
			if c == '0' {
				return "1"
			}
			return "0"
		}
		tests := map[string]string{
			"wrong secret":         whole[:len(whole)-1] + flip(whole[len(whole)-1]),
			"unknown id":           "mpsi_" + other + "_" + secret,
			"empty":                "",
			"no prefix":            tok.ID + "_" + secret,
			"upper-case":           strings.ToUpper(whole),
			"secret too short":     whole[:len(whole)-2],
			"trailing space":       whole + " ",
			"separator misplaced":  "mpsi_" + tok.ID[:15] + "_" + tok.ID[15:] + secret[1:],
			"secret alone":         secret,
			"hash of the secret":   "mpsi_" + tok.ID + "_" + hashSecret(secret),
			"non-hex id same size": "mpsi_" + strings.Repeat("g", 16) + "_" + secret,
		}
		for name, presented := range tests {
			t.Run(name, func(t *testing.T) {
				_, err := s.VerifyToken(t.Context(), presented)
				if !errors.Is(err, ErrInvalidToken) {
					t.Errorf("VerifyToken(%q) = %v, want ErrInvalidToken", presented, err)
				}
			})
		}
	})
}

// The database holds the SHA-256 of the secret and never the token or the
// secret, in the table or anywhere in its files.
func TestTokenStoredHashed(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			dsn := b.dsn(t)
			testTokenStoredHashed(t, openDSN(t, dsn), b.name == "sqlite", dsn)
		})
	}
}

// testTokenStoredHashed reads every column of the token table; for SQLite
// (path, the database file) the files too.
func testTokenStoredHashed(t *testing.T, s *Store, sqlite bool, path string) {
	whole, tok := mustToken(t, s, NewToken{Name: "ops", Role: RoleAdmin})
	secret := whole[len(whole)-64:]
	if _, err := s.VerifyToken(t.Context(), whole); err != nil {
		t.Fatal(err)
	}

	rows, err := s.db.QueryContext(t.Context(), `SELECT * FROM api_tokens`)
	if err != nil {
		t.Fatal(err)
	}
	cols, _ := rows.Columns()
	n := 0
	for rows.Next() {
		n++
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			text := toText(v)
			if strings.Contains(text, secret) {
				t.Errorf("column %s holds the secret: %q", cols[i], text)
			}
			if cols[i] == "secret_sha256" {
				sum := sha256.Sum256([]byte(secret))
				if text != hex.EncodeToString(sum[:]) {
					t.Errorf("secret_sha256 = %q, want the hex SHA-256 of the secret", text)
				}
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if n != 1 {
		t.Fatalf("%d token rows, want 1 (id %s)", n, tok.ID)
	}

	if !sqlite {
		return
	}
	// Nor in the database files (the WAL included).
	files, _ := filepath.Glob(path + "*")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s contains the secret", f)
		}
	}
}

func toText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case nil:
		return ""
	}
	return ""
}

func TestCreateTokenChecks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		s := open()
		tests := []struct {
			name string
			nt   NewToken
			want string
		}{
			{"host token without host", NewToken{Role: RoleHost, Host: "  "}, "needs the name of its host"},
			{"viewer naming a host", NewToken{Role: RoleViewer, Host: "gpu-1"}, "only a host token names a host"},
			{"no role", NewToken{Name: "x"}, `role "" is not admin, host or viewer`},
			{"unknown role", NewToken{Role: "root"}, `role "root" is not admin`},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, _, err := s.CreateToken(t.Context(), tt.nt)
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("CreateToken(%+v) = %v, want ErrInvalid with %q", tt.nt, err, tt.want)
				}
			})
		}
		if list, err := s.ListTokens(t.Context()); err != nil || len(list) != 0 {
			t.Errorf("refused creates left tokens: %+v, %v", list, err)
		}
	})
}

func TestListAndRevokeTokens(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		s := open()
		ctx := t.Context()
		base := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
		var wholes []string
		var created []Token
		manualUpkeep(t, s)
		for i, nt := range []NewToken{{Name: "a", Role: RoleAdmin}, {Name: "b", Role: RoleHost, Host: "gpu-2"}, {Name: "c", Role: RoleViewer}} {
			s.now = func() time.Time { return base.Add(time.Duration(i) * time.Second) }
			w, tok := mustToken(t, s, nt)
			wholes, created = append(wholes, w), append(created, tok)
		}
		list, err := s.ListTokens(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 3 {
			t.Fatalf("ListTokens = %+v, want 3", list)
		}
		for i, got := range list {
			if got != created[i] {
				t.Errorf("token %d listed as %+v, created as %+v", i, got, created[i])
			}
		}

		if err := s.RevokeToken(ctx, created[1].ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.VerifyToken(ctx, wholes[1]); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("revoked token verified: %v", err)
		}
		if _, err := s.VerifyToken(ctx, wholes[0]); err != nil {
			t.Errorf("revoking one token broke another: %v", err)
		}
		if err := s.RevokeToken(ctx, created[1].ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("second revoke = %v, want ErrNotFound", err)
		}
		if list, _ := s.ListTokens(ctx); len(list) != 2 {
			t.Errorf("after revoke ListTokens = %+v, want 2", list)
		}
	})
}

// last_used_at moves at most once a minute, so reads stay reads.
func TestTokenLastUsed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		s := open()
		ctx := t.Context()
		manualUpkeep(t, s)
		t0 := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
		clock := t0
		s.now = func() time.Time { return clock }
		whole, _ := mustToken(t, s, NewToken{Role: RoleViewer})
		lastUsed := func() time.Time {
			t.Helper()
			list, err := s.ListTokens(ctx)
			if err != nil || len(list) != 1 {
				t.Fatalf("ListTokens = %+v, %v", list, err)
			}
			return list[0].LastUsedAt
		}
		if !lastUsed().IsZero() {
			t.Fatalf("a new token has last_used_at %v", lastUsed())
		}
		// The uses are written by the upkeep (flushTokenUses), whether
		// the token was read from the database or answered from the cache
		// (cached: the revocation log read just before).
		for _, step := range []struct {
			at     time.Duration
			cached bool
			want   time.Duration
		}{
			{5 * time.Second, false, 5 * time.Second},
			{40 * time.Second, true, 5 * time.Second},
			{64 * time.Second, false, 5 * time.Second},
			{66 * time.Second, true, 66 * time.Second},
			{100 * time.Second, true, 66 * time.Second},
			{127 * time.Second, false, 127 * time.Second},
		} {
			clock = t0.Add(step.at)
			if step.cached {
				if err := s.checkRevocations(ctx); err != nil {
					t.Fatal(err)
				}
				if _, ok := s.tokens.get(tokenCacheKey(whole), clock); !ok {
					t.Fatalf("+%v: not cached", step.at)
				}
			}
			if _, err := s.VerifyToken(ctx, whole); err != nil {
				t.Fatal(err)
			}
			s.flushTokenUses(ctx)
			if got := lastUsed(); !got.Equal(t0.Add(step.want)) {
				t.Errorf("used at +%v: last_used_at = +%v, want +%v", step.at, got.Sub(t0), step.want)
			}
		}
	})
}
