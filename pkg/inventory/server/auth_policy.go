package server

import (
	"errors"
	"net/http"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// Authorization is in two steps:
//
//  1. Before the handler, the route's access (the table in routePolicy)
//     decides from the token's role alone: admin may call every route,
//     viewer the routes marked viewer, host the routes marked with a host
//     access. A refusal is a 403 naming the role, method and path; nothing
//     has been read or written yet.
//  2. For the routes a host token may call for its own host only (hostOwn),
//     the handler asks, once it knows which host the request touches, one
//     of mayRegisterHost, mayCreateDevice or mayChangeDevice. They pass
//     admin tokens straight through; a host token must name its own host
//     (by the host's name, as the token stores it) and may not attach or
//     detach (set guest_id), nor force a purge.

// hostAccess is what a host token may do on a route.
type hostAccess int

const (
	hostNone hostAccess = iota // not at all
	hostAll                    // as any caller (reads)
	hostOwn                    // only for its own host; the handler checks
)

// access says who may call a route besides admin, who may call them all.
type access struct {
	viewer bool
	host   hostAccess
}

// routePolicy is the access of each route pattern registered in New. A
// pattern missing here is admin-only (see authorize), so a new route is
// closed until someone opens it here. Every hostOwn route's handler must
// call one of the may* checks below; TestHostScope sends each of them a
// host token naming another host.
func routePolicy() map[string]access {
	read := access{viewer: true, host: hostAll}
	own := access{host: hostOwn}
	admin := access{}
	return map[string]access{
		"GET /hosts":      read,
		"GET /hosts/{id}": read,
		// A host registers itself (client.EnsureHost, or Cloudpods' host
		// agent in its zone) and updates its record (the agent does at each
		// start: mayUpdateHost); only admin renames or removes hosts.
		"POST /hosts":              own,
		"POST /zones/{zone}/hosts": own,
		"PUT /hosts/{id}":          own,
		"DELETE /hosts/{id}":       admin,

		"GET /isolated_devices":      read,
		"GET /isolated_devices/{id}": read,
		// A host syncs its own devices (client.SyncDevices); a forced purge,
		// which detaches the guest, is admin's (mayForce).
		"POST /isolated_devices":            own,
		"PUT /isolated_devices/{id}":        own,
		"DELETE /isolated_devices/{id}":     own,
		"POST /isolated_devices/{id}/purge": own,

		// Handing devices to guests is the scheduler's (an admin token's).
		"POST /servers/{guest}/attach-isolated-device": admin,
		"POST /servers/{guest}/detach-isolated-device": admin,

		// The one zone, wire and network a host agent looks up (region.go).
		"GET /zones":      read,
		"GET /zones/{id}": read,
		"GET /wires/{id}": read,
		"GET /networks":   read,

		// Keystone: checking a token, revoking a keystone token (whose
		// secret the caller must have), and the rest (501).
		"GET /v3/auth/tokens":    read,
		"HEAD /v3/auth/tokens":   read,
		"DELETE /v3/auth/tokens": read,
		"/v3/":                   read,

		// Prometheus scrapes with a viewer token.
		"GET /metrics": read,

		// No such route: whoever is authenticated gets the 501.
		"/": read,
	}
}

// authorize wraps the handler of pattern with step 1. A pattern
// routePolicy does not list is admin-only.
func (s *server) authorize(pattern string, h handlerFunc) handlerFunc {
	acc, listed := s.policy[pattern]
	if !listed {
		s.log.Warn("route missing from the access policy (auth_policy.go): admin only", "route", pattern)
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		tok, ok := principal(r)
		if !ok {
			return errors.New("authorize: request without a principal") // New wires authenticate first
		}
		allowed := tok.Role == store.RoleAdmin ||
			tok.Role == store.RoleViewer && acc.viewer ||
			tok.Role == store.RoleHost && acc.host != hostNone
		if !allowed {
			return forbidden("role %s may not %s %s", tok.Role, r.Method, r.URL.Path)
		}
		return h(w, r)
	}
}

// ownHost is the host a host token acts for, as registered: the host of
// that name (GetHost also finds by id, so the name is checked).
func (s *server) ownHost(r *http.Request, tok store.Token) (api.Host, error) {
	h, err := s.st.GetHost(r.Context(), tok.Host)
	if errors.Is(err, store.ErrNotFound) || err == nil && h.Name != tok.Host {
		return api.Host{}, forbidden("token for host %s: host %s is not registered yet (POST /hosts first)", tok.Host, tok.Host)
	}
	return h, err
}

// scoped returns the token of a request that step 2 must check, or false
// for an admin token (allowed everything).
func scoped(r *http.Request) (store.Token, bool, error) {
	tok, ok := principal(r)
	switch {
	case !ok:
		return store.Token{}, false, errors.New("authorize: request without a principal")
	case tok.Role == store.RoleAdmin:
		return tok, false, nil
	case tok.Role == store.RoleHost:
		return tok, true, nil
	}
	return store.Token{}, false, forbidden("role %s may not %s %s", tok.Role, r.Method, r.URL.Path)
}

// mayRegisterHost: POST /hosts with name. A host token registers only the
// host it is for.
func (s *server) mayRegisterHost(r *http.Request, name *string) error {
	tok, check, err := scoped(r)
	if !check || err != nil {
		return err
	}
	if name == nil || *name != tok.Host {
		return forbidden("token for host %s may not register host %s", tok.Host, deref(name))
	}
	return nil
}

// mayUpdateHost: PUT /hosts/{id}. A host token updates its own host only,
// and does not rename it (its token names the host).
func (s *server) mayUpdateHost(r *http.Request, idOrName string, in *hostInput) error {
	tok, check, err := scoped(r)
	if !check || err != nil {
		return err
	}
	own, err := s.ownHost(r, tok)
	if err != nil {
		return err
	}
	if idOrName != own.ID && idOrName != own.Name {
		return forbidden("token for host %s may not update host %s", tok.Host, idOrName)
	}
	if in.Name != nil && *in.Name != "" && *in.Name != own.Name {
		return forbidden("token for host %s may not rename its host: renaming is for admin tokens", tok.Host)
	}
	return nil
}

// mayCreateDevice: POST /isolated_devices. A host token creates devices of
// its own host only, and unattached.
func (s *server) mayCreateDevice(r *http.Request, in *deviceInput) error {
	return s.mayCreateDevices(r, []*deviceInput{in}, false)
}

// mayCreateDevices is mayCreateDevice for each of ins, the token's host
// read once; for a bulk create a refusal names the row.
func (s *server) mayCreateDevices(r *http.Request, ins []*deviceInput, bulk bool) error {
	tok, check, err := scoped(r)
	if !check || err != nil {
		return err
	}
	var own *api.Host
	for i, in := range ins {
		err := s.mayCreate(r, tok, in, &own)
		if err != nil && bulk {
			return atRow(i, err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// mayCreate is mayCreateDevice's check of one device for host token tok;
// *own is the token's host once read.
func (s *server) mayCreate(r *http.Request, tok store.Token, in *deviceInput, own **api.Host) error {
	if in.GuestID != nil && *in.GuestID != "" {
		return forbidden("token for host %s may not set guest_id: attaching is for admin tokens", tok.Host)
	}
	if in.HostID == nil || *in.HostID == "" {
		return nil // nothing to create: the store refuses it (400)
	}
	if *own == nil {
		h, err := s.ownHost(r, tok)
		if err != nil {
			return err
		}
		*own = &h
	}
	if *in.HostID == (*own).ID || *in.HostID == (*own).Name {
		return nil
	}
	return forbidden("token for host %s may not create isolated devices of host %s", tok.Host, *in.HostID)
}

// mayChangeDevice: PUT, DELETE and purge of /isolated_devices/{id}, where
// idOrName is the path's {id}; in is the PUT body, nil for the others. A
// host token changes its own host's devices only, may not move one to
// another host, nor attach or detach it. It returns what the handler is to
// change: the id of the device checked (so a rename in between cannot turn
// the request to another device), or idOrName for an admin token.
func (s *server) mayChangeDevice(r *http.Request, idOrName string, in *deviceInput) (string, error) {
	tok, check, err := scoped(r)
	if !check || err != nil {
		return idOrName, err
	}
	d, err := s.st.GetDevice(r.Context(), idOrName)
	if err != nil {
		return "", err // 404: a host token may read every device anyway
	}
	own, err := s.ownHost(r, tok)
	if err != nil {
		return "", err
	}
	if d.HostID != own.ID {
		return "", forbidden("token for host %s may not %s %s: the device belongs to host %s", tok.Host, r.Method, r.URL.Path, d.HostID)
	}
	if in == nil {
		return d.ID, nil
	}
	if in.HostID != nil && *in.HostID != "" && *in.HostID != own.ID && *in.HostID != own.Name {
		return "", forbidden("token for host %s may not move isolated device %s to host %s", tok.Host, d.ID, *in.HostID)
	}
	if in.GuestID != nil && *in.GuestID != d.GuestID {
		return "", forbidden("token for host %s may not change guest_id: attaching and detaching are for admin tokens", tok.Host)
	}
	return d.ID, nil
}

// mayForce: a purge with force (which detaches the guest) is admin's.
func (s *server) mayForce(r *http.Request) error {
	tok, check, err := scoped(r)
	if !check || err != nil {
		return err
	}
	return forbidden("role %s may not force a purge: it detaches the guest, which is for admin tokens", tok.Role)
}
