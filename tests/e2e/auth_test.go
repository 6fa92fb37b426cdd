package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// Every inventory of these tests has its own database and admin token
// file, found by its URL: startInventory makes them (the inventory writes
// the token file itself, as installed), or newEnv does first when the
// daemon must start before the inventory (then `mps-inventory token
// create` provisions the token, and the inventory keeps it).

type inventoryFiles struct{ db, tokenFile string }

// inventories maps an inventory URL to its files.
var inventories sync.Map

// newInventoryFiles returns fresh paths; nothing exists yet.
func newInventoryFiles(t *testing.T) *inventoryFiles {
	t.Helper()
	dir := t.TempDir()
	return &inventoryFiles{db: filepath.Join(dir, "inventory.db"), tokenFile: filepath.Join(dir, "auth", "admin.token")}
}

func registerInventory(t *testing.T, url string, f *inventoryFiles) {
	t.Helper()
	inventories.Store(url, f)
	t.Cleanup(func() { inventories.Delete(url) })
}

// filesFor returns the files of the inventory at url; for an inventory not
// started yet it makes a database holding an admin token, and the token
// file, so that a daemon can start first.
func filesFor(t *testing.T, url string) *inventoryFiles {
	t.Helper()
	if f, ok := inventories.Load(url); ok {
		return f.(*inventoryFiles)
	}
	f := newInventoryFiles(t)
	token, errOut, code := run(t, nil, "mps-inventory", "token", "create", "--role", "admin", "--name", "e2e", "--db", f.db)
	if code != 0 {
		t.Fatalf("mps-inventory token create: exit %d: %s", code, errOut)
	}
	if err := os.MkdirAll(filepath.Dir(f.tokenFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	registerInventory(t, url, f)
	return f
}

// tokenFor is the admin token of the inventory at url.
func tokenFor(t *testing.T, url string) string {
	t.Helper()
	b, err := os.ReadFile(filesFor(t, url).tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// mpsctlEnv is the environment of a mpsctl run against the inventory at url.
func mpsctlEnv(t *testing.T, url string) []string {
	t.Helper()
	return []string{"MPS_INVENTORY_URL=" + url, "MPS_INVENTORY_TOKEN=" + tokenFor(t, url)}
}

// startInventoryWith starts mps-inventory on its own files, extra added
// to its flags, and returns its http:// URL once it serves.
func startInventoryWith(t *testing.T, listen string, f *inventoryFiles, extra ...string) (*proc, string) {
	t.Helper()
	addrFile := filepath.Join(t.TempDir(), "addr")
	p := start(t, "mps-inventory", append([]string{"--listen", listen, "--db", f.db, "--admin-token-file", f.tokenFile, "--address-file", addrFile}, extra...)...)
	var addr string
	eventually(t, "inventory address file", func() (bool, string) {
		b, err := os.ReadFile(addrFile)
		addr = strings.TrimSpace(string(b))
		return err == nil && addr != "", p.Output()
	})
	return p, "http://" + addr
}

func hostsStatus(t *testing.T, url, token string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", url+"/hosts", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

var tokenFormat = regexp.MustCompile(`^mpsi_[0-9a-f]{16}_[0-9a-f]{64}$`)

// The local default: the installed inventory writes an admin token only
// root can read, keeps it across restarts, replaces it when the database
// is new, and mpsctl finds it through host.conf with no flag.
func TestLocalDefaultAdminToken(t *testing.T) {
	f := newInventoryFiles(t)
	inv, url := startInventoryWith(t, "127.0.0.1:0", f)

	fi, err := os.Stat(f.tokenFile)
	if err != nil {
		t.Fatalf("no admin token file: %v\n%s", err, inv.Output())
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("admin token file mode %v, want 0600", fi.Mode().Perm())
	}
	if di, err := os.Stat(filepath.Dir(f.tokenFile)); err != nil || di.Mode().Perm() != 0o700 {
		t.Errorf("its directory: %v, %v; want mode 0700", di.Mode().Perm(), err)
	}
	b, _ := os.ReadFile(f.tokenFile)
	token := strings.TrimSpace(string(b))
	if !tokenFormat.MatchString(token) {
		t.Fatalf("admin token file holds %q", b)
	}
	if strings.Contains(inv.Output(), token) || strings.Contains(inv.Output(), token[len(token)-64:]) {
		t.Errorf("the inventory logged the token:\n%s", inv.Output())
	}
	if s := hostsStatus(t, url, ""); s != http.StatusUnauthorized {
		t.Errorf("GET /hosts without a token: %d, want 401", s)
	}
	if s := hostsStatus(t, url, token); s != http.StatusOK {
		t.Errorf("GET /hosts with the admin token: %d, want 200", s)
	}

	// mpsctl with host.conf naming the inventory and the token file, as on
	// the host where the daemon's host.conf says so, and no other setting.
	hostConf := filepath.Join(t.TempDir(), "host.conf")
	mpsctl := func() (string, string, int) {
		t.Helper()
		// The port changes with each start.
		if err := os.WriteFile(hostConf, []byte("mps_inventory_url: "+url+"\nmps_inventory_token_file: "+f.tokenFile+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return run(t, []string{"MPS_HOST_CONF=" + hostConf, "MPS_INVENTORY_URL=", "MPS_INVENTORY_TOKEN="}, "mpsctl", "isolated-device-list")
	}
	if out, errOut, code := mpsctl(); code != 0 || !strings.Contains(out, "*** Total: 0 ") {
		t.Fatalf("mpsctl with host.conf: exit %d\n%s%s", code, out, errOut)
	}

	// A restart keeps the file and makes no new token.
	if err := inv.Stop(t); err != nil {
		t.Fatalf("inventory exit: %v", err)
	}
	inv, url = startInventoryWith(t, "127.0.0.1:0", f)
	if b2, _ := os.ReadFile(f.tokenFile); string(b2) != string(b) {
		t.Errorf("a restart rewrote the admin token file")
	}
	if s := hostsStatus(t, url, token); s != http.StatusOK {
		t.Errorf("the kept token after a restart: %d", s)
	}
	list, _, code := run(t, nil, "mps-inventory", "token", "list", "--db", f.db)
	if code != 0 || strings.Count(list, "local-admin") != 1 || strings.Count(list, "\n") != 2 {
		t.Errorf("token list after a restart, want one local-admin token:\n%s", list)
	}

	// Revoking it works across processes: the running inventory, which has
	// just accepted the token (and keeps it in its token cache), refuses it
	// within store.TokenCacheTTL. Waited for; the bound is a hang
	// detector, far past that (a request of a loaded machine can take
	// seconds).
	id := token[len("mpsi_") : len("mpsi_")+16]
	if _, errOut, code := run(t, nil, "mps-inventory", "token", "revoke", id, "--db", f.db); code != 0 {
		t.Fatalf("token revoke: %s", errOut)
	}
	revokedAt := time.Now()
	for hostsStatus(t, url, token) != http.StatusUnauthorized {
		if time.Since(revokedAt) > time.Minute {
			t.Fatalf("revoked token still accepted %v after the revoke (TokenCacheTTL %v)", time.Since(revokedAt), store.TokenCacheTTL)
		}
		time.Sleep(store.TokenCacheTTL / 20)
	}
	if _, errOut, code := mpsctl(); code != 1 || !strings.Contains(errOut, "HTTP 401 UnauthorizedError") {
		t.Errorf("mpsctl with the revoked token: exit %d, %q", code, errOut)
	}

	// The token is no longer valid (as after deleting the database): the
	// next start writes a new one, and says so.
	if err := inv.Stop(t); err != nil {
		t.Fatal(err)
	}
	inv, url = startInventoryWith(t, "127.0.0.1:0", f)
	b3, _ := os.ReadFile(f.tokenFile)
	if string(b3) == string(b) || !tokenFormat.MatchString(strings.TrimSpace(string(b3))) {
		t.Fatalf("admin token file after a revoke and a restart: %q", b3)
	}
	inv.logs(t, "writing a new admin token")
	if !strings.Contains(inv.Output(), "level=WARN") {
		t.Errorf("the new token is not logged as a warning:\n%s", inv.Output())
	}
	if _, _, code := mpsctl(); code != 0 {
		t.Errorf("mpsctl with the new token: exit %d", code)
	}
}

// On a cluster's GPU hosts the daemon runs with a host token: it registers
// and syncs its own host; a token for another host gets it nowhere.
func TestDaemonWithHostToken(t *testing.T) {
	_, url := startInventory(t, "127.0.0.1:0")
	f := filesFor(t, url)
	hostToken := func(host string) string {
		t.Helper()
		token, errOut, code := run(t, nil, "mps-inventory", "token", "create", "--role", "host", "--host", host, "--db", f.db)
		if code != 0 {
			t.Fatalf("token create: %s", errOut)
		}
		path := filepath.Join(t.TempDir(), host+".token")
		if err := os.WriteFile(path, []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	useToken := func(e *env, path string) {
		t.Helper()
		b, err := os.ReadFile(e.hostConf)
		if err != nil {
			t.Fatal(err)
		}
		conf := strings.Replace(string(b), "mps_inventory_token_file: "+f.tokenFile, "mps_inventory_token_file: "+path, 1)
		if err := os.WriteFile(e.hostConf, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// A token for another host: every write is refused, nothing registered.
	wrong := newEnv(t, url, "127.0.0.1:0")
	useToken(wrong, hostToken("other-host"))
	d := startDaemon(t, wrong)
	eventually(t, "a refused reconcile", func() (bool, string) {
		return strings.Contains(d.Output(), "token for host other-host may not register host e2e-host"), d.Output()
	})
	if err := d.Stop(t); err != nil {
		t.Fatalf("daemon exit: %v", err)
	}
	if n := listAll(t, url).Total; n != 0 {
		t.Fatalf("%d devices registered with another host's token", n)
	}

	// Its own host's token: the daemon registers its 10 devices.
	e := newEnv(t, url, "127.0.0.1:0")
	useToken(e, hostToken("e2e-host"))
	d = startDaemon(t, e)
	eventually(t, "first reconcile", func() (bool, string) { return reconciles(d) > 0, d.Output() })
	if n := listAll(t, url).Total; n != 10 {
		t.Errorf("%d devices registered with the host's own token, want 10", n)
	}
}
