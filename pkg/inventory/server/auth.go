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
// project's); or, with Options.HostCertificates, a host's verified TLS
// client certificate stands for a host token of that host
// (certificateHost). A token is an API token from the store's table (see
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
			if host, ok, why := s.certificateHost(r); ok {
				recordPrincipal(w, host)
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, host)))
				return
			} else if why != "" {
				s.writeError(w, &httpError{http.StatusUnauthorized, api.ClassUnauthorized, why})
				return
			}
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

// certTokenPrefix begins the token id a certificate's principal is logged
// and counted under: cert-<serial in hex>.
const certTokenPrefix = "cert-"

// certificateHost is the principal of a request without a token that
// presented a client certificate the TLS handshake verified against the
// listener's client CAs (Options.HostCertificates): a host token of the
// host named by the certificate's subject common name, with a host
// token's rights and no more. A verified certificate whose common name is
// no host name is refused (why says so); without a verified certificate
// there is no principal and no reason.
func (s *server) certificateHost(r *http.Request) (tok store.Token, ok bool, why string) {
	if !s.hostCerts || r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return store.Token{}, false, ""
	}
	leaf := r.TLS.VerifiedChains[0][0]
	name := leaf.Subject.CommonName
	if name == "" || len(name) > api.MaxNameBytes || api.NameProblem(name) != "" || strings.TrimSpace(name) != name {
		return store.Token{}, false, fmt.Sprintf("client certificate (serial %s): its subject's common name %q is no host name, and no token was given", leaf.SerialNumber.Text(16), name)
	}
	return store.Token{ID: certTokenPrefix + leaf.SerialNumber.Text(16), Name: "certificate " + leaf.Subject.String(), Role: store.RoleHost, Host: name}, true, ""
}

// forbidden is the 403 of a valid token that may not do what it asked;
// the details name what was refused.
func forbidden(format string, args ...any) error {
	return &httpError{http.StatusForbidden, api.ClassForbidden, fmt.Sprintf(format, args...)}
}
