package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/pki"
)

// The keystone face's flags are checked before anything is opened.
func TestServeFlagsChecked(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--keystone-token-ttl", "1s"}, "--keystone-token-ttl 1s: must be between 1m and 720h"},
		{[]string{"--keystone-token-ttl", "9000h"}, "--keystone-token-ttl"},
		{[]string{"--region", ""}, "--region: empty"},
		{[]string{"--public-url", "ftp://x"}, `--public-url "ftp://x": not an http(s) URL`},
		{[]string{"--public-url", "inventory:9330"}, "not an http(s) URL"},
		{[]string{"--host-certificates"}, "--host-certificates: the web configuration (--web.config.file) must verify client certificates"},
		{[]string{"--web.config.file", "/nonexistent/web.yml"}, "--web.config.file: web config file: open /nonexistent/web.yml"},
		{[]string{"--web.config.file", basicAuthOnly(t)}, "basic_auth_users: the inventory's clients (mps-daemon, mpsctl, climc) authenticate with API and keystone tokens"},
	} {
		var out, errOut bytes.Buffer
		db := filepath.Join(t.TempDir(), "inventory.db")
		args := append([]string{"serve", "--db", db, "--admin-token-file", "", "--listen", "127.0.0.1:0"}, tt.args...)
		if code := run(args, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", tt.args, code, errOut.String(), tt.want)
		}
	}
}

// basicAuthOnly is a web configuration with a user and no TLS.
func basicAuthOnly(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(path, []byte("basic_auth_users:\n  "+pki.BasicAuthUser+": "+pki.BasicAuthHash+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
