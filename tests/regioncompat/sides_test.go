package regioncompat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
	// newGuest makes a guest that may hold devices (a no-op for the
	// inventory, which keeps no guests).
	newGuest func(ctx context.Context, id, hostID string) error
	// settle waits until an attach or detach on guest id is done (see
	// cloudpods.SettleGuest; a no-op for the inventory).
	settle func(ctx context.Context, id string) error
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
		call:     cp.Call,
		newGuest: cp.CreateGuest,
		settle:   cp.SettleGuest,
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
		tok, err := keystoneLogin(ctx, srv.URL+"/v3", user, token)
		if err != nil {
			return err
		}
		return jsonCall(ctx, method, srv.URL+path, tok, body, out)
	}
	return s, srv
}

// keystoneLogin is POST /v3/auth/tokens with a password, as Cloudpods'
// clients log in; it returns X-Subject-Token.
func keystoneLogin(ctx context.Context, authURL, user, password string) (string, error) {
	body := map[string]any{"auth": map[string]any{
		"identity": map[string]any{"methods": []string{"password"}, "password": map[string]any{
			"user": map[string]any{"name": user, "domain": map[string]any{"name": "Default"}, "password": password}}},
		"scope": map[string]any{"project": map[string]any{"name": "system", "domain": map[string]any{"name": "Default"}}},
	}}
	var tok string
	err := do(ctx, http.MethodPost, authURL+"/auth/tokens", "", body, nil, func(h http.Header) { tok = h.Get("X-Subject-Token") })
	if err == nil && tok == "" {
		err = fmt.Errorf("login as %s: no X-Subject-Token", user)
	}
	return tok, err
}

func jsonCall(ctx context.Context, method, url, token string, body, out any) error {
	return do(ctx, method, url, token, body, out, nil)
}

func do(ctx context.Context, method, url, token string, body, out any, header func(http.Header)) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("X-Auth-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, b)
	}
	if header != nil {
		header(resp.Header)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
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
