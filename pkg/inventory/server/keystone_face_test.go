package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// passwordAuth is the body climc sends (mcclient's v3 password auth).
func passwordAuth(user, password string) string {
	b, _ := json.Marshal(map[string]any{"auth": map[string]any{
		"context": map[string]any{"source": "cli"},
		"identity": map[string]any{"methods": []string{"password"}, "password": map[string]any{
			"user": map[string]any{"domain": map[string]any{"name": "Default"}, "name": user, "password": password}}},
		"scope": map[string]any{"project": map[string]any{"domain": map[string]any{"name": "Default"}, "name": "system"}},
	}})
	return string(b)
}

func tokenAuth(tok string) string {
	b, _ := json.Marshal(map[string]any{"auth": map[string]any{
		"identity": map[string]any{"methods": []string{"token"}, "token": map[string]any{"id": tok}},
	}})
	return string(b)
}

// keystoneAnswer is what mcclient reads of a token.
type keystoneAnswer struct {
	Token struct {
		Methods   []string  `json:"methods"`
		ExpiresAt time.Time `json:"expires_at"`
		User      struct{ ID, Name string }
		Project   struct{ ID, Name string }
		Roles     []struct{ Name string }
		Catalog   []struct {
			Type      string `json:"type"`
			Endpoints []struct {
				Interface string `json:"interface"`
				RegionID  string `json:"region_id"`
				URL       string `json:"url"`
			} `json:"endpoints"`
		} `json:"catalog"`
	} `json:"token"`
}

// A Cloudpods client logs in with an API token as its password (the user
// being the token's name or id), gets a keystone token and a catalog that
// points at the inventory, and uses the keystone token in X-Auth-Token with
// the API token's role.
func TestKeystoneLogin(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{Region: "region7"})
		e.seed()
		viewer, vt, err := e.st.CreateToken(t.Context(), store.NewToken{Name: "ops-viewer", Role: store.RoleViewer})
		if err != nil {
			t.Fatal(err)
		}
		login := func(body string) (int, http.Header, []byte) {
			return e.callFull("POST", "/v3/auth/tokens", body, "Authorization", "")
		}

		status, hdr, body := login(passwordAuth("ops-viewer", viewer))
		subject := hdr.Get("X-Subject-Token")
		if status != http.StatusOK || !store.IsKeystoneToken(subject) || strings.Contains(string(body), viewer) {
			t.Fatalf("login: %d, X-Subject-Token %q, body %s", status, subject, body)
		}
		var ans keystoneAnswer
		if err := json.Unmarshal(body, &ans); err != nil {
			t.Fatal(err)
		}
		tok := ans.Token
		if tok.User.ID != vt.ID || tok.User.Name != "ops-viewer" || tok.Project.Name != "system" ||
			len(tok.Roles) != 1 || tok.Roles[0].Name != "viewer" || strings.Join(tok.Methods, ",") != "password" {
			t.Errorf("token %+v", tok)
		}
		if d := time.Until(tok.ExpiresAt); d < 23*time.Hour || d > 25*time.Hour {
			t.Errorf("expires in %s, want 24h", d)
		}
		urls := map[string]string{}
		for _, svc := range tok.Catalog {
			for _, ep := range svc.Endpoints {
				if ep.RegionID != "region7" {
					t.Errorf("endpoint %s/%s in region %s, want region7", svc.Type, ep.Interface, ep.RegionID)
				}
				urls[svc.Type+"/"+ep.Interface] = ep.URL
			}
		}
		for _, want := range []string{"compute_v2/internal", "compute_v2/public", "compute/internal", "identity/internal"} {
			if _, ok := urls[want]; !ok {
				t.Errorf("catalog lacks %s: %v", want, urls)
			}
		}
		if urls["compute_v2/internal"] != e.srv.URL || urls["identity/public"] != e.srv.URL+"/v3" {
			t.Errorf("catalog URLs %v, want the inventory at %s", urls, e.srv.URL)
		}

		// The keystone token works in X-Auth-Token, with the viewer's rights.
		if st, b := e.call("GET", "/isolated_devices", "", "Authorization", "", "X-Auth-Token", subject); st != http.StatusOK {
			t.Errorf("list with X-Auth-Token: %d %s", st, b)
		}
		st, b := e.call("POST", "/hosts", `{"host":{"name":"x"}}`, "Authorization", "", "X-Auth-Token", subject)
		checkError(t, st, b, http.StatusForbidden, api.ClassForbidden, "role viewer may not POST /hosts")
		// So does the API token itself, and Bearer keeps working.
		if st, b := e.call("GET", "/hosts", "", "Authorization", "", "X-Auth-Token", viewer); st != http.StatusOK {
			t.Errorf("list with the API token in X-Auth-Token: %d %s", st, b)
		}
		if st, b := e.call("GET", "/hosts", "", "Authorization", "Bearer "+subject); st != http.StatusOK {
			t.Errorf("list with the keystone token as bearer: %d %s", st, b)
		}

		// Token method: a new keystone token, no longer-lived than the one
		// it came from.
		status, hdr, body = login(tokenAuth(subject))
		again := hdr.Get("X-Subject-Token")
		if status != http.StatusOK || !store.IsKeystoneToken(again) || again == subject {
			t.Fatalf("token login: %d %q %s", status, again, body)
		}
		var ans2 keystoneAnswer
		_ = json.Unmarshal(body, &ans2)
		if ans2.Token.ExpiresAt.After(tok.ExpiresAt) || ans2.Token.Project.Name != "system" {
			t.Errorf("rescoped token expires %s (first %s), project %q", ans2.Token.ExpiresAt, tok.ExpiresAt, ans2.Token.Project.Name)
		}
		if status, _, _ := login(tokenAuth(viewer)); status != http.StatusOK {
			t.Errorf("token login with an API token: %d", status)
		}

		// Checking and revoking a keystone token, keystone's way.
		st, hdr, b = e.callFull("GET", "/v3/auth/tokens", "", "Authorization", "", "X-Auth-Token", subject, "X-Subject-Token", again)
		if st != http.StatusOK || hdr.Get("X-Subject-Token") != again || !strings.Contains(string(b), `"catalog"`) {
			t.Errorf("GET /v3/auth/tokens: %d %s", st, b)
		}
		st, _, _ = e.callFull("HEAD", "/v3/auth/tokens", "", "Authorization", "", "X-Auth-Token", subject, "X-Subject-Token", again)
		if st != http.StatusOK {
			t.Errorf("HEAD /v3/auth/tokens: %d", st)
		}
		if st, b := e.call("DELETE", "/v3/auth/tokens", "", "Authorization", "", "X-Auth-Token", subject, "X-Subject-Token", again); st != http.StatusNoContent {
			t.Errorf("DELETE /v3/auth/tokens: %d %s", st, b)
		}
		st, b = e.call("GET", "/hosts", "", "Authorization", "", "X-Auth-Token", again)
		checkError(t, st, b, http.StatusUnauthorized, api.ClassUnauthorized, "invalid token")
		st, b = e.call("GET", "/v3/auth/tokens", "", "Authorization", "", "X-Auth-Token", subject, "X-Subject-Token", again)
		checkError(t, st, b, http.StatusNotFound, api.ClassNotFound, "no such keystone token")

		// Revoking the API token ends its keystone tokens at once.
		if err := e.st.RevokeToken(t.Context(), vt.ID); err != nil {
			t.Fatal(err)
		}
		st, b = e.call("GET", "/hosts", "", "Authorization", "", "X-Auth-Token", subject)
		checkError(t, st, b, http.StatusUnauthorized, api.ClassUnauthorized, "invalid token")
	})
}

// What a login is refused for, and that a refused login hands out nothing.
func TestKeystoneLoginRefused(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		unnamed, ut, err := e.st.CreateToken(t.Context(), store.NewToken{Role: store.RoleAdmin})
		if err != nil {
			t.Fatal(err)
		}
		wrongSecret := e.admin[:len(e.admin)-4] + "0000"
		if wrongSecret == e.admin {
			wrongSecret = e.admin[:len(e.admin)-4] + "1111"
		}
		tests := []struct {
			name, body string
			status     int
			class      string
		}{
			{"wrong user", passwordAuth("someone", e.admin), 401, api.ClassUnauthorized},
			{"wrong password", passwordAuth("test-admin", wrongSecret), 401, api.ClassUnauthorized},
			{"not a token", passwordAuth("test-admin", "hunter2"), 401, api.ClassUnauthorized},
			{"a token without name is its id", passwordAuth(ut.ID, unnamed), 200, ""},
			{"the name of an unnamed token", passwordAuth("", unnamed), 401, api.ClassUnauthorized},
			{"a keystone-shaped fake", tokenAuth("mpsk_0123456789abcdef_" + strings.Repeat("0", 64)), 401, api.ClassUnauthorized},
			{"no method", `{"auth":{"identity":{"methods":[]}}}`, 401, api.ClassUnauthorized},
			{"no auth", `{}`, 400, api.ClassInputParameter},
			{"not JSON", `{"auth":`, 400, api.ClassInputParameter},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				st, hdr, b := e.callFull("POST", "/v3/auth/tokens", tt.body, "Authorization", "")
				if tt.status == 200 {
					if st != 200 || hdr.Get("X-Subject-Token") == "" {
						t.Errorf("%d %s", st, b)
					}
					return
				}
				checkError(t, st, b, tt.status, tt.class, "")
				if hdr.Get("X-Subject-Token") != "" {
					t.Errorf("a refused login got a token")
				}
			})
		}
		st, _, b := e.callFull("POST", "/v3/auth/tokens", passwordAuth("test-admin", e.admin), "Authorization", "", "Content-Type", "text/plain")
		checkError(t, st, b, http.StatusUnsupportedMediaType, api.ClassUnsupportedMediaType, "application/json")
	})
}
