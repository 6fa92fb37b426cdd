package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// Authentication: every API call carries `Authorization: Bearer <token>`,
// a token from the store's table (see store.CreateToken). /healthz and
// /readyz are served before this and stay open. Authentication runs before
// routing, so a caller without a token learns nothing, not even which
// paths exist; an unknown path is a 404 only for an authenticated caller.

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

// authenticate lets a request through with its token in the context, or
// answers 401. A malformed, unknown, revoked or wrong token all get the same
// answer ("invalid token"); the store does the same work for each. The
// token never reaches a log: only its public id does, on the request line.
func (s *server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		presented, ok := bearer(r.Header.Get("Authorization"))
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mps-inventory"`)
			s.writeError(w, &httpError{http.StatusUnauthorized, api.ClassUnauthorized, "missing bearer token"})
			return
		}
		tok, err := s.st.VerifyToken(r.Context(), presented)
		if errors.Is(err, store.ErrInvalidToken) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mps-inventory", error="invalid_token"`)
			s.writeError(w, &httpError{http.StatusUnauthorized, api.ClassUnauthorized, "invalid token"})
			return
		}
		if err != nil {
			s.writeError(w, err) // the database failed: 500, cause in the log
			return
		}
		recordPrincipal(w, tok)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, tok)))
	})
}

// forbidden is the 403 of a valid token that may not do what it asked;
// the details name what was refused.
func forbidden(format string, args ...any) error {
	return &httpError{http.StatusForbidden, api.ClassForbidden, fmt.Sprintf(format, args...)}
}
