package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrInvalidToken: a bearer token that is malformed, unknown (never
// created, or revoked) or whose secret is wrong. The three are not told
// apart to the caller.
var ErrInvalidToken = errors.New("invalid token")

// Role is what an API token may do; the server's policy table says which
// role each route needs.
type Role string

const (
	// RoleAdmin may do everything.
	RoleAdmin Role = "admin"
	// RoleHost may read everything and register and sync its own host (the
	// token's Host) and that host's devices.
	RoleHost Role = "host"
	// RoleViewer may read everything.
	RoleViewer Role = "viewer"
)

// ParseRole reads a role name as the token command takes it.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleAdmin, RoleHost, RoleViewer:
		return r, nil
	}
	return "", refuse(ErrInvalid, "role %q is not admin, host or viewer", s)
}

// Token is a stored API token, without its secret.
type Token struct {
	// ID is the public part of the token, the key it is looked up by.
	ID   string
	Name string
	Role Role
	// Host is the name of the host a RoleHost token acts for; empty for the
	// other roles.
	Host      string
	CreatedAt time.Time
	// LastUsedAt is zero for a token never used; it is kept to the minute.
	LastUsedAt time.Time
}

// NewToken is what CreateToken needs.
type NewToken struct {
	Name string
	Role Role
	// Host is required for RoleHost and refused for the others.
	Host string
}

// Token format: mpsi_<id>_<secret>, id 8 random bytes and secret 32 random
// bytes, both lower-case hex (so '_' never occurs inside either).
const (
	tokenPrefix   = "mpsi_"
	tokenIDBytes  = 8
	secretBytes   = 32
	tokenIDLen    = 2 * tokenIDBytes
	tokenSecLen   = 2 * secretBytes
	tokenLen      = len(tokenPrefix) + tokenIDLen + 1 + tokenSecLen
	lastUsedEvery = time.Minute
)

// dummyHash is compared against when a token's id is unknown, so that an
// unknown id costs the same work as a wrong secret.
var dummyHash = hashSecret(strings.Repeat("0", tokenSecLen))

func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// parseToken splits mpsi_<id>_<secret>.
func parseToken(s string) (id, secret string, ok bool) { return parseSecret(tokenPrefix, s) }

// parseSecret splits <prefix><id>_<secret>, the shape of API and keystone
// tokens (prefixes of the same length).
func parseSecret(prefix, s string) (id, secret string, ok bool) {
	if len(s) != tokenLen || !strings.HasPrefix(s, prefix) || s[len(prefix)+tokenIDLen] != '_' {
		return "", "", false
	}
	id = s[len(prefix) : len(prefix)+tokenIDLen]
	secret = s[len(prefix)+tokenIDLen+1:]
	if !isLowerHex(id) || !isLowerHex(secret) {
		return "", "", false
	}
	return id, secret, true
}

func isLowerHex(s string) bool {
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reading random bytes: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// tokenColumns are the api_tokens columns scanToken reads, in its order.
const tokenColumns = `id, name, role, host_name, created_at, last_used_at`

// qualified is the comma-separated columns cols, each prefixed with table
// (for a join): qualified("t", "id, name") is "t.id, t.name".
func qualified(table, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = table + "." + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

// CreateToken makes a token and returns it whole (mpsi_<id>_<secret>)
// together with its stored form. The whole token exists only in the return
// value: the database keeps the SHA-256 of the secret.
func (s *Store) CreateToken(ctx context.Context, nt NewToken) (string, Token, error) {
	ctx, cancel := context.WithTimeout(ctx, txTimeout)
	defer cancel()
	if _, err := ParseRole(string(nt.Role)); err != nil {
		return "", Token{}, err
	}
	nt.Host = strings.TrimSpace(nt.Host)
	switch {
	case nt.Role == RoleHost && nt.Host == "":
		return "", Token{}, refuse(ErrInvalid, "a host token needs the name of its host")
	case nt.Role != RoleHost && nt.Host != "":
		return "", Token{}, refuse(ErrInvalid, "only a host token names a host (role is %s)", nt.Role)
	}
	id, err := randomHex(tokenIDBytes)
	if err != nil {
		return "", Token{}, err
	}
	secret, err := randomHex(secretBytes)
	if err != nil {
		return "", Token{}, err
	}
	t := Token{ID: id, Name: nt.Name, Role: nt.Role, Host: nt.Host, CreatedAt: s.timestamp()}
	_, err = s.db.ExecContext(ctx, s.d.bind(`INSERT INTO api_tokens (id, name, role, host_name, secret_sha256, created_at)
		VALUES (?, ?, ?, ?, ?, ?)`),
		t.ID, t.Name, string(t.Role), sql.NullString{String: t.Host, Valid: t.Host != ""},
		hashSecret(secret), formatTime(t.CreatedAt))
	if err != nil {
		return "", Token{}, fmt.Errorf("inserting token %s: %w", t.ID, err)
	}
	return tokenPrefix + id + "_" + secret, t, nil
}

// ListTokens returns every token, oldest first, without secrets.
func (s *Store) ListTokens(ctx context.Context) ([]Token, error) {
	ctx, cancel := context.WithTimeout(ctx, txTimeout)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, `SELECT `+tokenColumns+` FROM api_tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("listing tokens: %w", err)
	}
	defer rows.Close()
	var out []Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("reading token row: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing tokens: %w", err)
	}
	return out, nil
}

// RevokeToken deletes a token (and its keystone tokens); the next request
// that presents it to this Store is refused, and another process's Store
// refuses it within TokenCacheTTL of the DELETE (see tokencache.go). An
// unknown id is ErrNotFound.
func (s *Store) RevokeToken(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, txTimeout)
	defer cancel()
	res, err := s.db.ExecContext(ctx, s.d.bind(`DELETE FROM api_tokens WHERE id = ?`), id)
	// After the DELETE: a verification that read the row before it must
	// not find the token cached after this returns.
	s.tokens.revoke(id)
	if err != nil {
		return fmt.Errorf("revoking token %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("revoking token %s: %w", id, err)
	} else if n == 0 {
		return refuse(ErrNotFound, "token %q not found", id)
	}
	return nil
}

// VerifyToken returns the token presented, or ErrInvalidToken when it is
// malformed, unknown or its secret is wrong. An unknown id and a wrong
// secret take the same path (one lookup, one hash, one constant-time
// comparison), so the answer time does not tell which ids exist. A token
// found valid before is answered from the cache while nothing revoked it
// (tokencache.go).
func (s *Store) VerifyToken(ctx context.Context, presented string) (Token, error) {
	id, secret, ok := parseToken(presented)
	if !ok {
		return Token{}, refuse(ErrInvalidToken, "malformed token")
	}
	key := tokenCacheKey(presented)
	if e, ok := s.cachedToken(ctx, key); ok {
		return e.api.used(e.usedAt), nil
	}
	gen := s.tokens.begin()
	ctx, cancel := context.WithTimeout(ctx, txTimeout)
	defer cancel()
	row := s.prep(s.db).QueryRowContext(ctx, s.d.bind(`SELECT `+tokenColumns+`, secret_sha256 FROM api_tokens WHERE id = ?`), id)
	var stored string
	t, err := scanToken(row, &stored)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return Token{}, fmt.Errorf("reading token %s: %w", id, err)
	}
	if !secretMatches(err == nil, secret, stored) {
		return Token{}, refuse(ErrInvalidToken, "invalid token")
	}
	now := s.now()
	if !s.tokens.put(key, cachedToken{api: t, until: now.Add(entryLifetime(key)), usedAt: now}, gen, now) {
		// Not cached: its use is not noted for the upkeep to write.
		s.touchToken(ctx, &t)
		return t, nil
	}
	return t.used(now), nil
}

// used is t as it is after a use at: LastUsedAt is at when the use is to
// be recorded (a minute or more after the last one recorded).
func (t Token) used(at time.Time) Token {
	if t.LastUsedAt.IsZero() || at.Sub(t.LastUsedAt) >= lastUsedEvery {
		t.LastUsedAt = at.UTC().Truncate(time.Second)
	}
	return t
}

// cachedToken answers key's entry from the cache; when the cache is stale
// and holds it, after reading the revocation log (freshenTokens).
func (s *Store) cachedToken(ctx context.Context, key tokenKey) (cachedToken, bool) {
	if e, ok := s.tokens.get(key, s.now()); ok {
		return e, true
	}
	if s.freshenTokens(ctx, key) {
		return s.tokens.get(key, s.now())
	}
	return cachedToken{}, false
}

// secretMatches reports whether a presented secret is the one whose hash
// was stored, found telling whether a row was. Without a row it compares
// against dummyHash all the same (and answers false), so an unknown id
// costs the work of a wrong secret.
func secretMatches(found bool, secret, stored string) bool {
	if !found {
		stored = dummyHash
	}
	match := subtle.ConstantTimeCompare([]byte(hashSecret(secret)), []byte(stored)) == 1
	return found && match
}

// touchToken records a use of t that the cache did not keep, at most
// once per lastUsedEvery (the cache's are written by the upkeep). The
// condition sits in the statement too, so servers sharing a database do not
// each write it. A failure is logged: it must not fail the request.
func (s *Store) touchToken(ctx context.Context, t *Token) {
	now := s.timestamp()
	if !t.LastUsedAt.IsZero() && now.Sub(t.LastUsedAt) < lastUsedEvery {
		return
	}
	_, err := s.db.ExecContext(ctx, s.d.bind(`UPDATE api_tokens SET last_used_at = ?
		WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)`),
		formatTime(now), t.ID, formatTime(now.Add(-lastUsedEvery)))
	if err != nil {
		s.log.Warn("recording token use", "token_id", t.ID, "error", err)
		return
	}
	t.LastUsedAt = now
}

// scanToken scans tokenColumns, then extra.
func scanToken(r rowScanner, extra ...any) (Token, error) {
	var t Token
	var role string
	var host sql.NullString
	var created dbTime
	var used nullTime
	if err := r.Scan(append([]any{&t.ID, &t.Name, &role, &host, &created, &used}, extra...)...); err != nil {
		return Token{}, err
	}
	t.Role, t.Host, t.CreatedAt, t.LastUsedAt = Role(role), host.String, created.t, used.t
	return t, nil
}

// nullTime scans a timestamp column that may be NULL (zero time).
type nullTime struct{ t time.Time }

func (n *nullTime) Scan(src any) error {
	if src == nil {
		n.t = time.Time{}
		return nil
	}
	var d dbTime
	if err := d.Scan(src); err != nil {
		return err
	}
	n.t = d.t
	return nil
}
