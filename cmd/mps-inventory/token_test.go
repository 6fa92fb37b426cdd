package main

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

var tokenLine = regexp.MustCompile(`^mpsi_[0-9a-f]{16}_[0-9a-f]{64}\n$`)

// mpsInventory runs the command in-process.
func mpsInventory(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

func TestTokenCommands(t *testing.T) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) { testTokenCommands(t, b.DSN(t)) })
	}
}

// testTokenCommands runs the token commands on the database db names (a
// SQLite path or a PostgreSQL DSN, as --db takes).
func testTokenCommands(t *testing.T, db string) {

	// create prints the token and nothing else on stdout.
	admin, errOut, code := mpsInventory(t, "token", "create", "--role", "admin", "--name", "ops", "--db", db)
	if code != 0 || !tokenLine.MatchString(admin) {
		t.Fatalf("token create: exit %d, stdout %q, stderr %q", code, admin, errOut)
	}
	if !strings.Contains(errOut, "created admin token") || !strings.Contains(errOut, "will not be shown again") {
		t.Errorf("stderr lacks the note: %q", errOut)
	}
	hostTok, _, code := mpsInventory(t, "--db", db, "token", "create", "--role", "host", "--host", "gpu-1", "--name", "agent gpu-1")
	if code != 0 || !tokenLine.MatchString(hostTok) {
		t.Fatalf("host token create: exit %d, %q", code, hostTok)
	}
	viewer, _, code := mpsInventory(t, "token", "create", "--role", "viewer", "--db", db)
	if code != 0 || !tokenLine.MatchString(viewer) {
		t.Fatalf("viewer token create: exit %d, %q", code, viewer)
	}

	// Refused creates print nothing on stdout and exit 1.
	for _, args := range [][]string{
		{"--role", "host"},
		{"--role", "viewer", "--host", "gpu-1"},
		{"--role", "root"},
		{},
	} {
		out, errOut, code := mpsInventory(t, append([]string{"token", "create", "--db", db}, args...)...)
		if code != 1 || out != "" || !strings.HasPrefix(errOut, "mps-inventory: ") {
			t.Errorf("token create %v: exit %d, stdout %q, stderr %q; want exit 1, a message, no stdout", args, code, out, errOut)
		}
	}

	// list shows each token's id, name, role and host, never a secret.
	st := storetest.Open(t, db)
	toks, err := st.ListTokens(t.Context())
	if err != nil || len(toks) != 3 {
		t.Fatalf("tokens in the database: %+v, %v; want 3", toks, err)
	}
	list, _, code := mpsInventory(t, "token", "list", "--db", db)
	if code != 0 {
		t.Fatalf("token list: exit %d", code)
	}
	lines := strings.Split(strings.TrimSuffix(list, "\n"), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "ID NAME ROLE HOST CREATED LAST USED" {
		t.Fatalf("token list:\n%s", list)
	}
	for i, want := range [][]string{{toks[0].ID, "ops", "admin", "-"}, {toks[1].ID, "agent gpu-1", "host", "gpu-1"}, {toks[2].ID, "-", "viewer", "-"}} {
		if !strings.HasPrefix(lines[i+1], want[0]+" ") ||
			!strings.Contains(lines[i+1], want[1]) || !strings.Contains(lines[i+1], want[2]) || !strings.Contains(lines[i+1], want[3]) ||
			!strings.HasSuffix(lines[i+1], "never") {
			t.Errorf("row %d = %q, want %q, never used", i, lines[i+1], want)
		}
	}
	for _, secret := range []string{admin, hostTok, viewer} {
		if strings.Contains(list, strings.TrimSpace(secret)[len("mpsi_")+16+1:]) {
			t.Errorf("token list shows a secret:\n%s", list)
		}
	}

	// revoke: the token stops working, the others do not.
	hostID := toks[1].ID
	if _, errOut, code := mpsInventory(t, "token", "revoke", hostID, "--db", db); code != 0 || !strings.Contains(errOut, "revoked token "+hostID) {
		t.Fatalf("token revoke: exit %d, %q", code, errOut)
	}
	if _, err := st.VerifyToken(t.Context(), strings.TrimSpace(hostTok)); !errors.Is(err, store.ErrInvalidToken) {
		t.Errorf("revoked token still verifies: %v", err)
	}
	if _, err := st.VerifyToken(t.Context(), strings.TrimSpace(admin)); err != nil {
		t.Errorf("admin token after revoking another: %v", err)
	}
	if _, errOut, code := mpsInventory(t, "token", "revoke", hostID, "--db", db); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("second revoke: exit %d, %q; want 1 and not found", code, errOut)
	}
	if _, _, code := mpsInventory(t, "token", "revoke", "--db", db); code != 1 {
		t.Errorf("revoke without an id: exit %d", code)
	}
}
