package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// Authentication: every API call carries a token, as `X-Auth-Token:
// <token>` (Cloudpods' clients) or `Authorization: Bearer <token>` (this
// project's). A token is an API token from the store's table (see
// store.CreateToken) or a keystone token the keystone face issued for one
// (keystone_face.go), which acts with its API token's role and host. /healthz,
// /readyz and the keystone login (POST /v3/auth/tokens) are served before
// this and stay open. Authentication runs before routing, so a caller
// without a token learns nothing, not even which paths exist.

// principalKey is the context key of the token a request authenticated with.
type principalKey struct{}

// principal returns the token of an authenticated request.
func principal(r *http.Request) (store.Token, bool) {
	t, ok := r.Context().Value(principalKey{}).(store.Token)
	return t, ok
}

// bearer extracts the token of an `Authorization: Bearer <token>` header;
// the scheme is case-insensitive (RFC 7235).
func bearer(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

// presentedToken is the token of r: X-Auth-Token, else the bearer token.
func presentedToken(r *http.Request) (string, bool) {
	if t := strings.TrimSpace(r.Header.Get("X-Auth-Token")); t != "" {
		return t, true
	}
	return bearer(r.Header.Get("Authorization"))
}

// presented is a verified token: the API token it acts for, and for a
// keystone token its expiry and project.
type presented struct {
	token   store.Token
	expires time.Time
	project string
}

// verifyPresented checks an API or keystone token (store.ErrInvalidToken
// for either when it is not valid).
func (s *server) verifyPresented(r *http.Request, tok string) (presented, error) {
	if store.IsKeystoneToken(tok) {
		kt, err := s.st.VerifyKeystoneToken(r.Context(), tok)
		return presented{token: kt.API, expires: kt.ExpiresAt, project: kt.Project}, err
	}
	t, err := s.st.VerifyToken(r.Context(), tok)
	return presented{token: t}, err
}

// authenticate lets a request through with its token in the context, or
// answers 401. A malformed, unknown, revoked, expired or wrong token all
// get the same answer ("invalid token"); the store does the same work for
// each. The token never reaches a log: only its public id does, on the
// request line.
func (s *server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := presentedToken(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mps-inventory"`)
			s.writeError(w, &httpError{http.StatusUnauthorized, api.ClassUnauthorized, "missing token (X-Auth-Token or Authorization: Bearer)"})
			return
		}
		p, err := s.verifyPresented(r, tok)
		if errors.Is(err, store.ErrInvalidToken) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mps-inventory", error="invalid_token"`)
			s.writeError(w, &httpError{http.StatusUnauthorized, api.ClassUnauthorized, "invalid token"})
			return
		}
		if err != nil {
			s.writeError(w, err) // the database failed: 500, cause in the log
			return
		}
		recordPrincipal(w, p.token)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p.token)))
	})
}

// forbidden is the 403 of a valid token that may not do what it asked;
// the details name what was refused.
func forbidden(format string, args ...any) error {
	return &httpError{http.StatusForbidden, api.ClassForbidden, fmt.Sprintf(format, args...)}
}
