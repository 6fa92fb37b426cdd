package server

import (
	"cmp"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// The keystone face: enough of keystone v3 for Cloudpods' clients (climc,
// the host agent, anything built on its mcclient) to authenticate against
// the inventory and find it in the service catalog, with no keystone.
//
// The inventory's users are its API tokens: the user name is a token's name
// (or its id, for a token without one), the password is the whole token
// (mpsi_...). Roles keep their meaning: what a user may do is what its
// token's role (admin, host, viewer) and host allow.
//
//	POST   /v3/auth/tokens  password or token method; answers 200 with
//	                        X-Subject-Token (a keystone token, mpsk_...,
//	                        good for KeystoneTokenTTL) and the token body
//	                        with the catalog. Open to all (it is the login).
//	GET    /v3/auth/tokens  validates X-Subject-Token (keystone's token
//	HEAD   /v3/auth/tokens  check, used by services); any valid token may ask
//	DELETE /v3/auth/tokens  revokes the keystone token X-Subject-Token
//	anything else under /v3 answers 404, or 405 with Allow for another method on /v3/auth/tokens
//
// The catalog lists identity (this /v3), compute_v2 and compute (the
// inventory itself), each with public, internal and admin endpoints in
// Options.Region, so a client finds the region whichever it looks up. The
// URL is Options.PublicURL, else the scheme and Host of the request that
// asked: a client sees the inventory at the address it used.
//
// A keystone token, not the API token, is what the client gets and keeps
// (climc caches it in a world-readable file under /tmp): it expires, and
// revoking its API token revokes it.

const (
	// DefaultRegion is the keystone region of the catalog.
	DefaultRegion = "region0"
	// DefaultKeystoneTokenTTL is how long a keystone token is good for:
	// keystone's default, and how long climc trusts its cached token.
	DefaultKeystoneTokenTTL = 24 * time.Hour
	// keystoneDomain is the one domain answered: Cloudpods' default.
	keystoneDomainID   = "default"
	keystoneDomainName = "Default"
)

// authRequest is the body of POST /v3/auth/tokens.
type authRequest struct {
	Auth *struct {
		Identity struct {
			Methods  []string `json:"methods"`
			Password *struct {
				User struct {
					ID       string `json:"id"`
					Name     string `json:"name"`
					Password string `json:"password"`
				} `json:"user"`
			} `json:"password"`
			Token *struct {
				ID string `json:"id"`
			} `json:"token"`
		} `json:"identity"`
		Scope *struct {
			Project *struct {
				ID   string `json:"id"`
				Name string `json:"name"`
			} `json:"project"`
		} `json:"scope"`
	} `json:"auth"`
}

// issueToken serves POST /v3/auth/tokens.
func (s *server) issueToken(w http.ResponseWriter, r *http.Request) error {
	var req authRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.Auth == nil {
		return badInput("missing field auth")
	}
	id := req.Auth.Identity
	methods := id.Methods
	project := ""
	if sc := req.Auth.Scope; sc != nil && sc.Project != nil {
		project = cmp.Or(sc.Project.Name, sc.Project.ID)
	}
	expires := time.Now().Add(s.keystoneTTL)
	var tok store.Token
	switch {
	case slices.Contains(methods, "password") && id.Password != nil:
		u := id.Password.User
		t, err := s.st.VerifyToken(r.Context(), u.Password)
		if err == nil && !userMatches(t, cmp.Or(u.Name, u.ID)) {
			err = store.ErrInvalidToken
		}
		if err != nil {
			return authFailed(err, "invalid user name or password (the password is an API token, the user its name or id)")
		}
		tok, methods = t, []string{"password"}
	case slices.Contains(methods, "token") && id.Token != nil:
		p, err := s.verifyPresented(r, id.Token.ID)
		if err != nil {
			return authFailed(err, "invalid token")
		}
		tok, methods = p.token, []string{"token"}
		if !p.expires.IsZero() && p.expires.Before(expires) {
			expires = p.expires // a rescoped token lives no longer than the one it came from
		}
		if project == "" {
			project = p.project
		}
	default:
		return &httpError{http.StatusUnauthorized, api.ClassUnauthorized,
			"auth.identity: methods must name password (with password.user) or token (with token.id)"}
	}
	whole, kt, err := s.st.CreateKeystoneToken(r.Context(), tok.ID, project, methods, expires)
	if err != nil {
		return authFailed(err, "invalid token")
	}
	recordPrincipal(w, tok)
	w.Header().Set("X-Subject-Token", whole)
	writeJSON(w, http.StatusOK, s.tokenBody(r, kt))
	return nil
}

// userMatches: a user is named by its token's name, or its id.
func userMatches(t store.Token, user string) bool {
	return user != "" && (user == t.ID || t.Name != "" && user == t.Name)
}

// authFailed answers a failed login: 401 for a bad credential, the error
// itself (500) for a failed database.
func authFailed(err error, msg string) error {
	if errors.Is(err, store.ErrInvalidToken) {
		return &httpError{http.StatusUnauthorized, api.ClassUnauthorized, msg}
	}
	return err
}

// checkToken serves GET and HEAD /v3/auth/tokens: the token in
// X-Subject-Token, when valid, answered as POST answers it.
func (s *server) checkToken(w http.ResponseWriter, r *http.Request) error {
	subject := strings.TrimSpace(r.Header.Get("X-Subject-Token"))
	kt, err := s.st.VerifyKeystoneToken(r.Context(), subject)
	if err != nil {
		if errors.Is(err, store.ErrInvalidToken) {
			return &httpError{http.StatusNotFound, api.ClassNotFound, "X-Subject-Token: no such keystone token"}
		}
		return err
	}
	w.Header().Set("X-Subject-Token", subject)
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return nil
	}
	writeJSON(w, http.StatusOK, s.tokenBody(r, kt))
	return nil
}

// revokeToken serves DELETE /v3/auth/tokens. An API token is revoked with
// `mps-inventory token revoke`, not here.
func (s *server) revokeToken(w http.ResponseWriter, r *http.Request) error {
	subject := strings.TrimSpace(r.Header.Get("X-Subject-Token"))
	if !store.IsKeystoneToken(subject) {
		return badInput("X-Subject-Token: only keystone tokens (mpsk_...) are revoked here; API tokens with mps-inventory token revoke")
	}
	if err := s.st.RevokeKeystoneToken(r.Context(), subject); err != nil {
		if errors.Is(err, store.ErrInvalidToken) {
			return &httpError{http.StatusNotFound, api.ClassNotFound, "X-Subject-Token: no such keystone token"}
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// keystoneNoRoute answers the rest of keystone's API.
func (s *server) keystoneNoRoute(w http.ResponseWriter, r *http.Request) error {
	return s.unserved(w, r, "mps-inventory's keystone implements POST, GET, HEAD and DELETE /v3/auth/tokens only, not %s %s")
}

// tokenBody is keystone's answer for kt: {"token": {...}}.
func (s *server) tokenBody(r *http.Request, kt store.KeystoneToken) map[string]any {
	domain := map[string]string{"id": keystoneDomainID, "name": keystoneDomainName}
	name := kt.API.Name
	if name == "" {
		name = kt.API.ID
	}
	tok := map[string]any{
		"methods":    kt.Methods,
		"issued_at":  wireTime(kt.CreatedAt),
		"expires_at": wireTime(kt.ExpiresAt),
		"audit_ids":  []string{kt.ID},
		"is_domain":  false,
		"user":       map[string]any{"id": kt.API.ID, "name": name, "domain": domain},
		"roles":      []map[string]string{{"id": string(kt.API.Role), "name": string(kt.API.Role)}},
		"catalog":    s.catalog(r),
	}
	if kt.Project != "" {
		tok["project"] = map[string]any{"id": kt.Project, "name": kt.Project, "domain": domain}
	}
	return map[string]any{"token": tok}
}

// catalog is the service catalog: identity, compute_v2 and compute, all
// this inventory.
func (s *server) catalog(r *http.Request) []map[string]any {
	base := s.publicURL
	if base == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + r.Host
	}
	var out []map[string]any
	for _, svc := range []struct{ typ, name, url string }{
		{"identity", "keystone", base + "/v3"},
		{"compute_v2", "region2", base},
		{"compute", "region", base},
	} {
		var eps []map[string]string
		for _, itf := range []string{"public", "internal", "admin"} {
			eps = append(eps, map[string]string{
				"id": svc.typ + "-" + itf, "interface": itf, "name": svc.typ + "-" + itf,
				"region": s.region, "region_id": s.region, "url": svc.url,
			})
		}
		out = append(out, map[string]any{"id": svc.typ, "name": svc.name, "type": svc.typ, "endpoints": eps})
	}
	return out
}
