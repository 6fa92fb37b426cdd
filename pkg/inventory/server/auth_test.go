package server

import (
	"net/http"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/api"
)

func TestTokens(t *testing.T) {
	e := newEnv(t, Options{Tokens: []string{"first-token", "second"}})
	tests := []struct {
		name, path, auth string
		want             int
		details          string
	}{
		{"no header", "/isolated_devices", "", http.StatusUnauthorized, "missing bearer token"},
		{"wrong scheme", "/isolated_devices", "Basic Zmlyc3Q6dG9rZW4=", http.StatusUnauthorized, "missing bearer token"},
		{"wrong token", "/isolated_devices", "Bearer first-tokem", http.StatusUnauthorized, "invalid token"},
		{"prefix of a token", "/isolated_devices", "Bearer first", http.StatusUnauthorized, "invalid token"},
		{"unknown route still needs a token", "/nothing", "", http.StatusUnauthorized, "missing bearer token"},
		{"first token", "/isolated_devices", "Bearer first-token", http.StatusOK, ""},
		{"second token, lower-case scheme", "/hosts", "bearer second", http.StatusOK, ""},
		{"healthz is open", "/healthz", "", http.StatusOK, ""},
		{"readyz is open", "/readyz", "", http.StatusOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hdr []string
			if tt.auth != "" {
				hdr = []string{"Authorization", tt.auth}
			}
			status, body := e.call("GET", tt.path, "", hdr...)
			if tt.want != http.StatusOK {
				checkError(t, status, body, tt.want, api.ClassUnauthorized, tt.details)
				return
			}
			if status != http.StatusOK {
				t.Errorf("status %d %s, want 200", status, body)
			}
		})
	}
}

func TestHealthAndRequestLog(t *testing.T) {
	e := newEnv(t, Options{})
	for _, path := range []string{"/healthz", "/readyz"} {
		if status, body := e.call("GET", path, ""); status != http.StatusOK || string(body) != "ok" {
			t.Errorf("GET %s = %d %q, want 200 ok", path, status, body)
		}
	}
	e.call("GET", "/isolated_devices?limit=1", "")
	e.call("GET", "/isolated_devices/nope", "")
	log := e.log.String()
	for _, want := range []string{
		`level=DEBUG msg=request method=GET path=/isolated_devices status=200 duration=`,
		`level=WARN msg=request method=GET path=/isolated_devices/nope status=404 duration=`,
		`query="limit=1"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("request log lacks %q:\n%s", want, log)
		}
	}

	// With the database gone, the client gets a generic 500 and the log
	// the cause; readiness fails.
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
}
