package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Keystone tokens are what the inventory's keystone face (POST
// /v3/auth/tokens) hands out for an API token: short-lived stand-ins that
// act with the API token's role and host. They exist so that Cloudpods'
// clients, which keep the token they are given in a world-readable cache
// file (climc writes /tmp/OS_AUTH_CACHE_TOKEN-...), never hold the API
// token itself beyond the call that presents it.
//
// A keystone token is mpsk_<id>_<secret>, shaped like an API token; the
// table keystone_tokens (migration 0006) keeps its id, the SHA-256 of its
// secret, its API token's id, the project the client asked for and the
// expiry. Revoking the API token deletes its keystone tokens (the foreign
// key cascades).

const keystonePrefix = "mpsk_"

// KeystoneToken is a stored keystone token, without its secret.
type KeystoneToken struct {
	ID string
	// API is the API token it acts for: its role and host are the keystone
	// token's.
	API Token
	// Project is the project name the client scoped it to (kept to be
	// answered back; the inventory has no projects).
	Project string
	// Methods are the keystone methods that made it ("password", "token").
	Methods   []string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// CreateKeystoneToken makes a keystone token acting for the API token
// apiTokenID, valid until expiresAt, and returns it whole together with its
// stored form. Expired keystone tokens of every API token are deleted on
// the way, so the table holds only live ones (and those of the last day).
func (s *Store) CreateKeystoneToken(ctx context.Context, apiTokenID, project string, methods []string, expiresAt time.Time) (string, KeystoneToken, error) {
	ctx, cancel := context.WithTimeout(ctx, txTimeout)
	defer cancel()
	id, err := randomHex(tokenIDBytes)
	if err != nil {
		return "", KeystoneToken{}, err
	}
	secret, err := randomHex(secretBytes)
	if err != nil {
		return "", KeystoneToken{}, err
	}
	now := s.timestamp()
	kt := KeystoneToken{ID: id, Project: project, Methods: methods, CreatedAt: now, ExpiresAt: expiresAt.UTC().Truncate(time.Microsecond)}
	err = s.inTx(ctx, false, func(tx *sql.Tx) error {
		row := s.prep(tx).QueryRowContext(ctx, s.d.bind(`SELECT `+tokenColumns+` FROM api_tokens WHERE id = ?`), apiTokenID)
		api, err := scanToken(row)
		if errors.Is(err, sql.ErrNoRows) {
			return refuse(ErrInvalidToken, "API token %s is revoked", apiTokenID)
		}
		if err != nil {
			return fmt.Errorf("reading token %s: %w", apiTokenID, err)
		}
		kt.API = api
		if _, err := s.prep(tx).ExecContext(ctx, s.d.bind(`DELETE FROM keystone_tokens WHERE expires_at < ?`), formatTime(now)); err != nil {
			return fmt.Errorf("deleting expired keystone tokens: %w", err)
		}
		_, err = s.prep(tx).ExecContext(ctx, s.d.bind(`INSERT INTO keystone_tokens
			(id, api_token_id, secret_sha256, project, methods, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)`),
			kt.ID, apiTokenID, hashSecret(secret), project, strings.Join(methods, ","), formatTime(kt.CreatedAt), formatTime(kt.ExpiresAt))
		if err != nil {
			return fmt.Errorf("inserting keystone token: %w", err)
		}
		return nil
	})
	if err != nil {
		return "", KeystoneToken{}, err
	}
	return keystonePrefix + id + "_" + secret, kt, nil
}

// verifyKeystoneQuery reads a keystone token by id with its API token:
// tokenColumns of the API token (scanToken), then the keystone token's.
var verifyKeystoneQuery = `SELECT ` + qualified("t", tokenColumns) + `,
	k.id, k.project, k.methods, k.created_at, k.expires_at, k.secret_sha256
	FROM keystone_tokens k JOIN api_tokens t ON t.id = k.api_token_id WHERE k.id = ?`

// VerifyKeystoneToken returns the keystone token presented, or
// ErrInvalidToken when it is malformed, unknown, expired, of a revoked API
// token, or its secret is wrong; like VerifyToken it does the same work
// for an unknown id as for a wrong secret.
func (s *Store) VerifyKeystoneToken(ctx context.Context, presented string) (KeystoneToken, error) {
	id, secret, ok := parseSecret(keystonePrefix, presented)
	if !ok {
		return KeystoneToken{}, refuse(ErrInvalidToken, "malformed token")
	}
	key := tokenCacheKey(presented)
	if e, ok := s.cachedToken(ctx, key); ok {
		e.keystone.API = e.api.used(e.usedAt)
		return e.keystone, nil
	}
	gen := s.tokens.begin()
	ctx, cancel := context.WithTimeout(ctx, txTimeout)
	defer cancel()
	row := s.prep(s.db).QueryRowContext(ctx, s.d.bind(verifyKeystoneQuery), id)
	var kt KeystoneToken
	var methods, stored string
	var created, expires dbTime
	api, err := scanToken(row, &kt.ID, &kt.Project, &methods, &created, &expires, &stored)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return KeystoneToken{}, fmt.Errorf("reading keystone token %s: %w", id, err)
	}
	if !secretMatches(err == nil, secret, stored) || !s.now().Before(expires.t) {
		return KeystoneToken{}, refuse(ErrInvalidToken, "invalid token")
	}
	kt.API, kt.CreatedAt, kt.ExpiresAt = api, created.t, expires.t
	if methods != "" {
		kt.Methods = strings.Split(methods, ",")
	}
	// Kept no longer than the token is good for.
	now := s.now()
	until := now.Add(entryLifetime(key))
	if kt.ExpiresAt.Before(until) {
		until = kt.ExpiresAt
	}
	if !s.tokens.put(key, cachedToken{api: kt.API, keystone: kt, until: until, usedAt: now}, gen, now) {
		s.touchToken(ctx, &kt.API)
		return kt, nil
	}
	kt.API = kt.API.used(now)
	return kt, nil
}

// RevokeKeystoneToken deletes the keystone token presented (keystone's
// DELETE /v3/auth/tokens); one that is not valid is ErrInvalidToken.
func (s *Store) RevokeKeystoneToken(ctx context.Context, presented string) error {
	kt, err := s.VerifyKeystoneToken(ctx, presented)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, txTimeout)
	defer cancel()
	_, err = s.db.ExecContext(ctx, s.d.bind(`DELETE FROM keystone_tokens WHERE id = ?`), kt.ID)
	s.tokens.revoke(kt.ID) // after the DELETE, as in RevokeToken
	if err != nil {
		return fmt.Errorf("revoking keystone token %s: %w", kt.ID, err)
	}
	return nil
}

// IsKeystoneToken tells a keystone token from an API token by its shape,
// so a caller knows which one to verify.
func IsKeystoneToken(presented string) bool { return strings.HasPrefix(presented, keystonePrefix) }
