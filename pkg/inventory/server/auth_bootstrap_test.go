package server

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// readToken returns the file's token after checking its mode.
func readToken(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(b), "\n") || strings.Count(string(b), "\n") != 1 {
		t.Errorf("token file content %q: want one line", b)
	}
	return strings.TrimSpace(string(b))
}

// hostsStatus is the status of GET /hosts with token, against st.
func hostsStatus(t *testing.T, st *store.Store, token string) int {
	t.Helper()
	srv := httptest.NewServer(New(st, Options{}, nil))
	defer srv.Close()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/hosts", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestEnsureAdminTokenFile(t *testing.T) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) { testEnsureAdminTokenFile(t, b) })
	}
}

func testEnsureAdminTokenFile(t *testing.T, b storetest.Backend) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state", "admin.token")
	st := storetest.Open(t, b.DSN(t))
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))

	// First start: the directory and the file appear, root-only, with a
	// working admin token.
	if err := EnsureAdminTokenFile(t.Context(), st, path, log); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("created directory: %v, %v; want mode 0700", fi.Mode(), err)
	}
	first := readToken(t, path)
	tok, err := st.VerifyToken(t.Context(), first)
	if err != nil || tok.Role != store.RoleAdmin || tok.Name != LocalAdminName {
		t.Fatalf("token in the file: %+v, %v; want an admin token named %s", tok, err, LocalAdminName)
	}
	if got := hostsStatus(t, st, first); got != http.StatusOK {
		t.Errorf("GET /hosts with the file's token: %d", got)
	}

	// Second start: left alone, no new token.
	if err := EnsureAdminTokenFile(t.Context(), st, path, log); err != nil {
		t.Fatal(err)
	}
	if got := readToken(t, path); got != first {
		t.Errorf("second start rewrote the file")
	}
	if list, _ := st.ListTokens(t.Context()); len(list) != 1 {
		t.Errorf("%d tokens after two starts, want 1", len(list))
	}

	// A new database (the old one deleted): the file's token is unknown to
	// it, so a new one is written, with a warning.
	st2 := storetest.Open(t, b.DSN(t))
	if err := EnsureAdminTokenFile(t.Context(), st2, path, log); err != nil {
		t.Fatal(err)
	}
	second := readToken(t, path)
	if second == first {
		t.Fatal("the file still holds the token of the old database")
	}
	if got := hostsStatus(t, st2, second); got != http.StatusOK {
		t.Errorf("GET /hosts with the rewritten token: %d", got)
	}
	if !strings.Contains(logBuf.String(), "level=WARN") || !strings.Contains(logBuf.String(), "holds no token this database knows") {
		t.Errorf("no warning for the rewrite:\n%s", logBuf.String())
	}
	if strings.Contains(logBuf.String(), first) || strings.Contains(logBuf.String(), second) {
		t.Errorf("the log holds a token:\n%s", logBuf.String())
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".admin.token-*")); len(leftovers) != 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

func TestEnsureAdminTokenFileCases(t *testing.T) {
	t.Run("empty path does nothing", func(t *testing.T) {
		st := storetest.Open(t, filepath.Join(t.TempDir(), "inventory.db"))
		if err := EnsureAdminTokenFile(t.Context(), st, "", nil); err != nil {
			t.Fatal(err)
		}
		if list, _ := st.ListTokens(t.Context()); len(list) != 0 {
			t.Errorf("tokens created: %+v", list)
		}
	})
	t.Run("garbage in the file is replaced", func(t *testing.T) {
		dir := t.TempDir()
		st := storetest.Open(t, filepath.Join(dir, "inventory.db"))
		path := filepath.Join(dir, "admin.token")
		if err := os.WriteFile(path, []byte("not a token\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := EnsureAdminTokenFile(t.Context(), st, path, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := st.VerifyToken(t.Context(), readToken(t, path)); err != nil {
			t.Errorf("rewritten token: %v", err)
		}
	})
	t.Run("a valid token of another role is kept", func(t *testing.T) {
		dir := t.TempDir()
		st := storetest.Open(t, filepath.Join(dir, "inventory.db"))
		viewer, _, err := st.CreateToken(t.Context(), store.NewToken{Role: store.RoleViewer})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "admin.token")
		if err := os.WriteFile(path, []byte(viewer+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := EnsureAdminTokenFile(t.Context(), st, path, nil); err != nil {
			t.Fatal(err)
		}
		if readToken(t, path) != viewer {
			t.Error("a valid token was replaced")
		}
	})
	t.Run("unwritable place: error, and no token left behind", func(t *testing.T) {
		dir := t.TempDir()
		st := storetest.Open(t, filepath.Join(dir, "inventory.db"))
		blocker := filepath.Join(dir, "file")
		if err := os.WriteFile(blocker, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		err := EnsureAdminTokenFile(t.Context(), st, filepath.Join(blocker, "admin.token"), nil)
		if err == nil {
			t.Fatal("no error for a path under a regular file")
		}
		if list, _ := st.ListTokens(t.Context()); len(list) != 0 {
			t.Errorf("tokens left: %+v", list)
		}
	})
	t.Run("a directory at the path is an error", func(t *testing.T) {
		dir := t.TempDir()
		st := storetest.Open(t, filepath.Join(dir, "inventory.db"))
		err := EnsureAdminTokenFile(t.Context(), st, dir, nil)
		if err == nil || !strings.Contains(err.Error(), "reading the admin token file") {
			t.Fatalf("err = %v", err)
		}
	})
}
