package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

func TestAuthentication(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		viewer, tok, err := e.st.CreateToken(t.Context(), store.NewToken{Name: "v", Role: store.RoleViewer})
		if err != nil {
			t.Fatal(err)
		}
		revoked, rtok, err := e.st.CreateToken(t.Context(), store.NewToken{Name: "gone", Role: store.RoleAdmin})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.st.RevokeToken(t.Context(), rtok.ID); err != nil {
			t.Fatal(err)
		}
		wrongSecret := viewer[:len(viewer)-4] + "beef"
		if wrongSecret == viewer {
			wrongSecret = viewer[:len(viewer)-4] + "dead"
		}
		unknownID := "mpsi_0123456789abcdef" + viewer[len("mpsi_")+16:]

		const missing, invalid = `Bearer realm="mps-inventory"`, `Bearer realm="mps-inventory", error="invalid_token"`
		tests := []struct {
			name, path, auth string
			want             int
			details, chal    string
		}{
			{"no header", "/isolated_devices", "", 401, "missing token", missing},
			{"basic scheme", "/isolated_devices", "Basic Zmlyc3Q6dG9rZW4=", 401, "missing token", missing},
			{"bearer without token", "/isolated_devices", "Bearer ", 401, "missing token", missing},
			{"garbage token", "/isolated_devices", "Bearer first-token", 401, "invalid token", invalid},
			{"wrong secret", "/isolated_devices", "Bearer " + wrongSecret, 401, "invalid token", invalid},
			{"unknown id", "/isolated_devices", "Bearer " + unknownID, 401, "invalid token", invalid},
			{"revoked token", "/hosts", "Bearer " + revoked, 401, "invalid token", invalid},
			{"unknown route needs a token first", "/nothing", "", 401, "missing token", missing},
			{"unknown route, invalid token", "/nothing", "Bearer " + wrongSecret, 401, "invalid token", invalid},
			{"valid token", "/isolated_devices", "Bearer " + viewer, 200, "", ""},
			{"lower-case scheme, spaces around", "/hosts", "bearer  " + viewer + " ", 200, "", ""},
			{"unknown route once authenticated", "/nothing", "Bearer " + viewer, 404, "has no GET /nothing", ""},
			{"healthz is open", "/healthz", "", 200, "", ""},
			{"readyz is open", "/readyz", "", 200, "", ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				status, hdr, body := e.callFull("GET", tt.path, "", "Authorization", tt.auth)
				switch tt.want {
				case 200:
					if status != 200 {
						t.Errorf("status %d %s, want 200", status, body)
					}
				case 401:
					checkError(t, status, body, 401, api.ClassUnauthorized, tt.details)
				default:
					checkError(t, status, body, tt.want, api.ClassHandlerNotFound, tt.details)
				}
				if got := hdr.Get("WWW-Authenticate"); got != tt.chal {
					t.Errorf("WWW-Authenticate = %q, want %q", got, tt.chal)
				}
			})
		}

		// The request log names the token by its public id, never the token.
		log := e.log.String()
		if !strings.Contains(log, "token_id="+tok.ID+" role=viewer") {
			t.Errorf("request log lacks the viewer's token id:\n%s", log)
		}
		for _, secret := range []string{viewer, viewer[len(viewer)-64:], wrongSecret[len(wrongSecret)-64:], revoked} {
			if strings.Contains(log, secret) {
				t.Fatalf("request log contains a token or secret:\n%s", log)
			}
		}
	})
}

func TestHealthAndRequestLog(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		for _, path := range []string{"/healthz", "/readyz"} {
			if status, body := e.call("GET", path, ""); status != http.StatusOK || string(body) != "ok" {
				t.Errorf("GET %s = %d %q, want 200 ok", path, status, body)
			}
		}
		e.call("GET", "/isolated_devices?limit=1", "")
		e.call("GET", "/isolated_devices/0b5e5b4e-5d5c-4d6a-9b1a-0c1d2e3f4a5b", "")
		log := e.log.String()
		for _, want := range []string{
			`level=DEBUG msg=request method=GET path=/isolated_devices status=200 duration=`,
			`level=DEBUG msg=request method=GET path=/isolated_devices/0b5e5b4e-5d5c-4d6a-9b1a-0c1d2e3f4a5b status=404 duration=`,
			`level=INFO msg="client error answered (more within a minute are summed up in one line)" route=/isolated_devices/{id} status=404`,
			`query="limit=1"`,
		} {
			if !strings.Contains(log, want) {
				t.Errorf("request log lacks %q:\n%s", want, log)
			}
		}

		// With the database gone, the client gets a generic 500 (the token
		// cannot be checked either) and the log the cause; readiness fails.
		_ = e.st.Close()
		status, body := e.call("GET", "/isolated_devices", "")
		checkError(t, status, body, http.StatusInternalServerError, api.ClassInternal, "internal server error")
		if strings.Contains(string(body), "database") {
			t.Errorf("500 answer leaks the cause: %s", body)
		}
		if status, _ := e.call("GET", "/readyz", ""); status != http.StatusServiceUnavailable {
			t.Errorf("readyz with the database closed = %d, want 503", status)
		}
		if log := e.log.String(); !strings.Contains(log, `level=ERROR msg=request method=GET path=/isolated_devices status=500`) ||
			!strings.Contains(log, "database is closed") {
			t.Errorf("500 not logged with its cause:\n%s", log)
		}
	})
}

// Revoking a token the server has just accepted (so the store holds it in
// its token cache): through the server's own store the next request is
// refused; through another process's (a second pool on the database, as
// `mps-inventory token revoke` or another inventory) within
// store.TokenCacheTTL. The test waits for the refusal, bounded well past
// the TTL, rather than for the TTL.
func TestRevokedTokenRefused(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		other := open()
		status := func(tok string) int {
			t.Helper()
			s, _ := e.call("GET", "/hosts", "", "Authorization", "Bearer "+tok)
			return s
		}
		for _, tt := range []struct {
			name    string
			revoker *store.Store
		}{{"here", e.st}, {"another process", other}} {
			t.Run(tt.name, func(t *testing.T) {
				tok, st, err := e.st.CreateToken(t.Context(), store.NewToken{Name: tt.name, Role: store.RoleViewer})
				if err != nil {
					t.Fatal(err)
				}
				if s := status(tok); s != http.StatusOK {
					t.Fatalf("new token: %d", s)
				}
				revokedAt := time.Now()
				if err := tt.revoker.RevokeToken(t.Context(), st.ID); err != nil {
					t.Fatal(err)
				}
				if tt.revoker == e.st {
					if s := status(tok); s != http.StatusUnauthorized {
						t.Errorf("token revoked through the server's store: %d, want 401 at once", s)
					}
					return
				}
				deadline := revokedAt.Add(10 * store.TokenCacheTTL)
				for status(tok) != http.StatusUnauthorized {
					if time.Now().After(deadline) {
						t.Fatalf("token revoked by another process still accepted %v later (TokenCacheTTL %v)", time.Since(revokedAt), store.TokenCacheTTL)
					}
					time.Sleep(store.TokenCacheTTL / 20)
				}
			})
		}
	})
}
