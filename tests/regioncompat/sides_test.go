package regioncompat

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/cloudpods"
	"yunion.io/x/mps-daemon/pkg/inventory/server"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// side is one of the two things compared: the real Cloudpods region, or an
// mps-inventory; both are driven the same way, through the real climc and
// Cloudpods-shaped requests.
type side struct {
	name string
	// run runs the real climc against this side, keeping its token cache
	// in tmp.
	run func(ctx context.Context, tmp string, args ...string) (result, error)
	// call sends a Cloudpods-shaped request (X-Auth-Token of a keystone
	// login) and decodes the answer into out.
	call func(ctx context.Context, method, path string, body, out any) error
	// newGuest makes a guest of that name that may hold devices (a no-op
	// for the inventory, which keeps no guests: there its name is its id).
	newGuest func(ctx context.Context, name, hostID string) error
	// settle waits until an attach or detach on the guest is done (see
	// cloudpods.SettleGuest; a no-op for the inventory).
	settle func(ctx context.Context, guest string) error
}

// result is what one climc run printed.
type result struct {
	stdout, stderr string
	code           int
}

// regionSide is the real region of cp.
func regionSide(cp *cloudpods.Cloud) *side {
	return &side{
		name: "region",
		run: func(ctx context.Context, tmp string, args ...string) (result, error) {
			o, e, code, err := cp.RunClimcAt(ctx, cp.Endpoint(), tmp, args...)
			return result{o, e, code}, err
		},
		call: cp.Call,
		newGuest: func(ctx context.Context, name, hostID string) error {
			_, err := cp.CreateGuest(ctx, name, hostID)
			return err
		},
		settle: cp.SettleGuest,
	}
}

// inventorySide serves st through the inventory's API on loopback and
// returns it with an admin token of the given name, the one user climc
// logs in as (the token is its password).
func inventorySide(t *testing.T, cp *cloudpods.Cloud, st *store.Store, user string) (*side, *httptest.Server) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(server.New(st, server.Options{}, log))
	t.Cleanup(srv.Close)
	token, _, err := st.CreateToken(t.Context(), store.NewToken{Name: user, Role: store.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	ep := cloudpods.Endpoint{AuthURL: srv.URL + "/v3", User: user, Password: token, Project: "system", Domain: "Default", Region: server.DefaultRegion}
	s := &side{
		name: "inventory",
		run: func(ctx context.Context, tmp string, args ...string) (result, error) {
			o, e, code, err := cp.RunClimcAt(ctx, ep, tmp, args...)
			return result{o, e, code}, err
		},
		newGuest: func(context.Context, string, string) error { return nil },
		settle:   func(context.Context, string) error { return nil },
	}
	s.call = func(ctx context.Context, method, path string, body, out any) error {
		tok, err := cloudpods.Login(ctx, ep)
		if err != nil {
			return err
		}
		_, err = cloudpods.Request(ctx, method, srv.URL+path, tok, body, out)
		return err
	}
	return s, srv
}

// climc runs the real climc against s.
func (s *side) climc(t *testing.T, args ...string) result {
	t.Helper()
	r, err := s.run(t.Context(), t.TempDir(), args...)
	if err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
	return r
}

// backend is the name of the storetest backend a subtest runs on.
func backend(t *testing.T) string {
	parts := strings.Split(t.Name(), "/")
	return parts[len(parts)-1]
}
