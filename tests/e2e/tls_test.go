package e2e

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/pki"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/status"
)

// Issue 47: nothing in clear. mps-inventory with a web configuration file
// answers only HTTPS; a daemon given the site's CA registers through it,
// one given another CA refuses and says why; the daemon's own /metrics and
// /status answer over TLS with basic auth; certificates are replaced on
// disk while daemons stay connected.

// tlsSite is a site CA with the inventory's certificate and web
// configuration, in a directory of the test.
type tlsSite struct {
	dir    string
	ca     *pki.CA
	caFile string
	// inventory is the inventory's certificate and key, its web
	// configuration naming them.
	inventory pki.Files
	webConfig string
}

func newTLSSite(t *testing.T) *tlsSite {
	t.Helper()
	s := &tlsSite{dir: t.TempDir(), ca: pki.NewCA(t, "site CA")}
	s.caFile = s.ca.WriteCA(t, filepath.Join(s.dir, "ca.crt"))
	s.inventory = s.ca.Issue(t, pki.Leaf{}).WriteFiles(t, s.dir, "inventory")
	s.webConfig = pki.WebConfig(t, s.dir, "tls_server_config:\n  cert_file: inventory.crt\n  key_file: inventory.key\n")
	return s
}

// renew replaces the inventory's certificate and key by issued.
func (s *tlsSite) renew(t *testing.T, issued pki.Issued) {
	t.Helper()
	issued.WriteFiles(t, s.dir, "inventory")
}

// startTLSInventory starts mps-inventory serving s's web configuration
// on listen over the database and token file of f, and returns it with
// its https:// URL once it serves.
func startTLSInventory(t *testing.T, s *tlsSite, listen string, f *inventoryFiles, extra ...string) (*proc, string) {
	t.Helper()
	p, plain := startInventoryWith(t, listen, f, append([]string{"--web.config.file", s.webConfig}, extra...)...)
	url := "https://" + strings.TrimPrefix(plain, "http://")
	registerInventory(t, url, f)
	return p, url
}

// tlsClient trusts the CAs of caFile.
func tlsClient(t *testing.T, caFile string) *http.Client {
	t.Helper()
	b, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := pki.Pool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("%s: no certificate", caFile)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// fetch GETs url with c (and basic auth when user is set) and returns the
// status, the body and the serial of the server's certificate.
func fetch(t *testing.T, c *http.Client, url, user, password string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error(), ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	serial := ""
	if resp.TLS != nil {
		serial = resp.TLS.PeerCertificates[0].SerialNumber.Text(16)
	}
	return resp.StatusCode, string(b), serial
}

// plainStatus reads the daemon's /status on a plain listener.
func plainStatus(t *testing.T, addr string) (status.Status, bool) {
	t.Helper()
	code, body := get("http://" + addr + "/status")
	var st status.Status
	if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil {
		return st, false
	}
	return st, true
}

func TestHTTPSInventoryAndTheDaemonsTLSListener(t *testing.T) {
	t.Parallel()
	s := newTLSSite(t)
	inv, url := startTLSInventory(t, s, "127.0.0.1:0", newInventoryFiles(t))
	addr := strings.TrimPrefix(url, "https://")
	inv.logs(t, "tls=true")
	if strings.Contains(inv.Output(), "plain HTTP beyond loopback") {
		t.Errorf("a TLS inventory warned of plain HTTP:\n%s", inv.Output())
	}
	// Only HTTPS: a plain request is answered 400 by the TLS port.
	if code, body := get("http://" + addr + "/healthz"); code != http.StatusBadRequest || !strings.Contains(body, "HTTP request to an HTTPS server") {
		t.Errorf("plain HTTP to the inventory: %d %q", code, body)
	}
	if code, body, _ := fetch(t, tlsClient(t, s.caFile), url+"/healthz", "", ""); code != http.StatusOK {
		t.Errorf("HTTPS /healthz: %d %s", code, body)
	}

	// The daemon: the site's CA for the inventory, its own listener
	// behind TLS and basic auth (its certificate from the same CA).
	daemonAddr := freePort(t)
	e := newEnv(t, url, daemonAddr)
	s.ca.Issue(t, pki.Leaf{}).WriteFiles(t, e.dir, "daemon")
	daemonWeb := pki.WebConfig(t, e.dir, fmt.Sprintf("tls_server_config:\n  cert_file: daemon.crt\n  key_file: daemon.key\nbasic_auth_users:\n  %s: %s\n", pki.BasicAuthUser, pki.BasicAuthHash))
	appendConf(t, e, "mps_inventory_ca_file: "+s.caFile+"\nmps_web_config_file: "+daemonWeb+"\n")
	d := startDaemon(t, e)
	eventually(t, "a reconcile through HTTPS", func() (bool, string) { return reconciles(d) > 0, d.Output() })
	if l := listAll(t, url, "MPS_INVENTORY_CA_FILE="+s.caFile); l.Total != 10 {
		t.Fatalf("devices registered over HTTPS: %d, want 10", l.Total)
	}
	d.logs(t, "tls=true")
	if strings.Contains(d.Output(), "reconcile failed") {
		t.Errorf("a reconcile failed:\n%s", d.Output())
	}

	// /metrics over TLS with basic auth; without the password, or in
	// plain HTTP, nothing.
	c := tlsClient(t, s.caFile)
	for _, tt := range []struct {
		user, password string
		want           int
	}{
		{"", "", http.StatusUnauthorized},
		{pki.BasicAuthUser, "wrong", http.StatusUnauthorized},
		{pki.BasicAuthUser, pki.BasicAuthPassword, http.StatusOK},
	} {
		code, body, _ := fetch(t, c, "https://"+daemonAddr+"/metrics", tt.user, tt.password)
		if code != tt.want || (code == http.StatusOK && !strings.Contains(body, "mps_daemon_inventory_reachable 1")) {
			t.Errorf("/metrics as %q/%q: %d, want %d\n%.400s", tt.user, tt.password, code, tt.want, body)
		}
	}
	if code, body := get("http://" + daemonAddr + "/status"); code != http.StatusBadRequest {
		t.Errorf("plain HTTP to the daemon's /status: %d %.200s", code, body)
	}

	// mps-daemon status finds the listener's TLS in host.conf, trusts the
	// certificate its web configuration names, and asks for the password.
	pw := filepath.Join(e.dir, "password")
	if err := os.WriteFile(pw, []byte(pki.BasicAuthPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, nil, "mps-daemon", "--config", e.hostConf, "status", "--user", pki.BasicAuthUser, "--password-file", pw)
	if code != 0 || !strings.Contains(out, "mps-daemon on e2e-host") || !strings.Contains(out, "reachable") {
		t.Errorf("mps-daemon status over TLS: exit %d\n%s%s", code, out, errOut)
	}
	_, errOut, code = run(t, nil, "mps-daemon", "--config", e.hostConf, "status")
	if code != 1 || !strings.Contains(errOut, "asks for a user and password") {
		t.Errorf("mps-daemon status without the password: exit %d %s", code, errOut)
	}
}

// The inventory's certificate renewed on disk while the daemon stays
// connected: no reconcile fails, new connections get the new certificate.
// Then a new site CA: the daemon's CA file becomes a bundle of both, the
// inventory's certificate one of the new CA, the bundle the new CA alone;
// the inventory restarts after each step, so the daemon connects again
// and verifies against its CA file as it is then, with no restart of its
// own.
func TestCertificatesRotatedWhileTheDaemonStaysConnected(t *testing.T) {
	t.Parallel()
	s := newTLSSite(t)
	files := newInventoryFiles(t)
	inv, url := startTLSInventory(t, s, "127.0.0.1:0", files)
	addr := strings.TrimPrefix(url, "https://")
	daemonAddr := freePort(t)
	e := newEnv(t, url, daemonAddr)
	daemonCA := filepath.Join(e.dir, "inventory-ca.crt")
	pki.Replace(t, daemonCA, s.ca.PEM)
	appendConf(t, e, "mps_inventory_ca_file: "+daemonCA+"\n")
	d := startDaemon(t, e)
	eventually(t, "first reconcile", func() (bool, string) { return reconciles(d) > 0, d.Output() })

	renewed := s.ca.Issue(t, pki.Leaf{})
	s.renew(t, renewed)
	if _, _, serial := fetch(t, tlsClient(t, s.caFile), url+"/healthz", "", ""); serial != renewed.Cert.SerialNumber.Text(16) {
		t.Errorf("a new connection after the renewal got serial %s, want %s", serial, renewed.Cert.SerialNumber.Text(16))
	}
	n := reconciles(d)
	eventually(t, "three reconciles after the renewal", func() (bool, string) { return reconciles(d) >= n+3, d.Output() })
	if strings.Contains(d.Output(), "reconcile failed") {
		t.Fatalf("a reconcile failed across the renewal:\n%s", d.Output())
	}

	next := pki.NewCA(t, "site CA 2027")
	restart := func(what string) {
		t.Helper()
		if err := inv.Stop(t); err != nil {
			t.Fatalf("inventory exit: %v", err)
		}
		since := time.Now()
		inv, _ = startTLSInventory(t, s, addr, files)
		waitStatus(t, daemonAddr, func(st status.Status) bool {
			return st.Ready && st.InventoryReachable && st.LastReconcile.After(since)
		}, d)
	}
	pki.Replace(t, daemonCA, append(append([]byte{}, s.ca.PEM...), next.PEM...))
	s.renew(t, next.Issue(t, pki.Leaf{}))
	restart("a reconcile with the new CA's certificate and the bundle")
	pki.Replace(t, daemonCA, next.PEM)
	restart("a reconcile with the new CA alone")
	if l := listAll(t, url, "MPS_INVENTORY_CA_FILE="+daemonCA); l.Total != 10 {
		t.Errorf("after the rotations: %d devices, want 10", l.Total)
	}
}

// lastLine is the last line of out that contains want.
func lastLine(out, want string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], want) {
			return lines[i]
		}
	}
	return ""
}

// A daemon refuses an inventory it cannot trust, each cause named in one
// line of its log and in /status, and keeps MPS running; it retries, and
// registers without a restart once the certificate is one it trusts.
func TestDaemonRefusesAnInventoryItCannotTrust(t *testing.T) {
	t.Parallel()
	s := newTLSSite(t)
	_, url := startTLSInventory(t, s, "127.0.0.1:0", newInventoryFiles(t))
	other := pki.NewCA(t, "another CA")
	daemonAddr := freePort(t)
	e := newEnv(t, url, daemonAddr)
	daemonCA := filepath.Join(e.dir, "inventory-ca.crt")
	pki.Replace(t, daemonCA, other.PEM)
	appendConf(t, e, "mps_inventory_ca_file: "+daemonCA+"\n")
	d := startDaemon(t, e)

	says := func(text string, want []string) bool {
		for _, w := range want {
			if !strings.Contains(text, w) {
				return false
			}
		}
		return true
	}
	refused := func(what string, want ...string) {
		t.Helper()
		eventually(t, what+": the log line", func() (bool, string) {
			return says(lastLine(d.Output(), "reconcile failed"), want), d.Output()
		})
		st := waitStatus(t, daemonAddr, func(st status.Status) bool { return says(st.LastError, want) }, d)
		if st.InventoryReachable || st.Ready {
			t.Errorf("%s: inventory_reachable %v ready %v", what, st.InventoryReachable, st.Ready)
		}
		// MPS as it was: every configured GPU's control daemon up.
		if len(st.GPUs) != 4 {
			t.Errorf("%s: %d GPUs in the status, want 4", what, len(st.GPUs))
		}
		for _, g := range st.GPUs {
			if !g.ControlDaemonUp {
				t.Errorf("%s: GPU %s's control daemon is down", what, g.UUID)
			}
		}
		if line := lastLine(d.Output(), "reconcile failed"); !strings.Contains(line, "retry_in=") {
			t.Errorf("%s: no retry in the log line: %s", what, line)
		}
	}
	// (The wants hold no quotes: the log's logfmt escapes them.)
	refused("another CA", "TLS refused: the server's certificate", "is signed by", "CN=site CA,O=mps-daemon tests", "not by a CA of "+daemonCA+" (mps_inventory_ca_file)")
	if strings.Contains(d.Output(), "stopping") || d.Exited() {
		t.Fatalf("the daemon stopped:\n%s", d.Output())
	}

	// The site's CA now, and the inventory's certificate each way wrong in
	// turn: each retry is a new handshake with the files as they are.
	for i, tt := range []struct {
		name string
		leaf pki.Leaf
		want string
	}{
		{"expired", pki.Leaf{NotBefore: time.Now().Add(-3 * time.Hour), NotAfter: time.Now().Add(-2 * time.Hour)}, "expired at "},
		{"not yet valid", pki.Leaf{NotBefore: time.Now().Add(2 * time.Hour), NotAfter: time.Now().Add(3 * time.Hour)}, "is not valid before "},
		{"another host name", pki.Leaf{DNS: []string{"inventory.example"}}, "is for inventory.example, not for"},
	} {
		s.renew(t, s.ca.Issue(t, tt.leaf))
		if i == 0 {
			pki.Replace(t, daemonCA, s.ca.PEM)
		}
		refused(tt.name, "TLS refused: the server's certificate", tt.want)
	}
	// Nothing went through: asked with a client that checks nothing.
	insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test's own look
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/hosts", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tokenFor(t, url))
	resp, err := insecure.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var hosts api.HostList
	err = json.NewDecoder(resp.Body).Decode(&hosts)
	resp.Body.Close()
	if err != nil || hosts.Total != 0 {
		t.Fatalf("the inventory holds %d hosts after refused connections (%v)", hosts.Total, err)
	}

	// A certificate it trusts: the daemon registers on its next retry.
	s.renew(t, s.ca.Issue(t, pki.Leaf{}))
	waitStatus(t, daemonAddr, func(st status.Status) bool { return st.Ready && st.InventoryReachable }, d)
	if l := listAll(t, url, "MPS_INVENTORY_CA_FILE="+s.caFile); l.Total != 10 {
		t.Errorf("after the refusals: %d devices, want 10", l.Total)
	}
}

// Plain HTTP to the TLS port, and https:// to a plain one: each refused
// with what to change.
func TestInventoryURLOfTheWrongScheme(t *testing.T) {
	t.Parallel()
	s := newTLSSite(t)
	_, url := startTLSInventory(t, s, "127.0.0.1:0", newInventoryFiles(t))
	plainURL := "http://" + strings.TrimPrefix(url, "https://")
	registerInventory(t, plainURL, filesFor(t, url))
	daemonAddr := freePort(t)
	e := newEnv(t, plainURL, daemonAddr)
	d := startDaemon(t, e)
	st := waitStatus(t, daemonAddr, func(st status.Status) bool { return st.LastError != "" }, d)
	if !strings.Contains(st.LastError, "the server speaks only HTTPS at this address: the URL says http://, make it https://") || st.InventoryReachable {
		t.Errorf("http:// to the TLS port: %+v", st.LastError)
	}

	_, plain := startInventory(t, "127.0.0.1:0")
	tlsToPlain := "https://" + strings.TrimPrefix(plain, "http://")
	registerInventory(t, tlsToPlain, filesFor(t, plain))
	daemonAddr = freePort(t)
	e = newEnv(t, tlsToPlain, daemonAddr)
	appendConf(t, e, "mps_inventory_ca_file: "+s.caFile+"\n")
	d = startDaemon(t, e)
	st = waitStatus(t, daemonAddr, func(st status.Status) bool { return st.LastError != "" }, d)
	if !strings.Contains(st.LastError, "the server does not speak TLS at this address") {
		t.Errorf("https:// to a plain port: %+v", st.LastError)
	}
}

// A plain inventory on every address warns of what crosses the network
// in clear; on loopback it does not.
func TestPlainInventoryBeyondLoopbackWarns(t *testing.T) {
	t.Parallel()
	p, _ := startInventory(t, "127.0.0.1:0")
	p.logs(t, "msg=serving")
	if strings.Contains(p.Output(), "plain HTTP beyond loopback") {
		t.Errorf("warned on loopback:\n%s", p.Output())
	}
	// Port 0 on the wildcard address: the inventory picks its port (no
	// port freed here that another test could take first).
	p, _ = startInventoryWith(t, "0.0.0.0:0", newInventoryFiles(t))
	p.logs(t, "plain HTTP beyond loopback: every host's, mpsctl's and climc's token")
	if n := strings.Count(p.Output(), "plain HTTP beyond loopback"); n != 1 {
		t.Errorf("%d warnings, want one", n)
	}
}

// A host without a token: its client certificate, of the hosts' CA and
// with its name as common name, registers it and its devices as its host
// token would (mps-inventory --host-certificates); a certificate naming
// another host is refused what that host's token would be refused.
func TestDaemonRegistersWithItsClientCertificate(t *testing.T) {
	t.Parallel()
	s := newTLSSite(t)
	hosts := pki.NewCA(t, "hosts CA")
	hosts.WriteCA(t, filepath.Join(s.dir, "hosts-ca.crt"))
	s.webConfig = pki.WebConfig(t, s.dir, "tls_server_config:\n  cert_file: inventory.crt\n  key_file: inventory.key\n"+
		"  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: hosts-ca.crt\n")
	inv, url := startTLSInventory(t, s, "127.0.0.1:0", newInventoryFiles(t), "--host-certificates")
	inv.logs(t, "host_certificates=true")

	withCert := func(cn, hostName string) (*env, string, *proc) {
		addr := freePort(t)
		e := newEnv(t, url, addr)
		f := hosts.Issue(t, pki.Leaf{CommonName: cn, Client: true}).WriteFiles(t, e.dir, "host")
		setKey(t, e.hostConf, "mps_inventory_token_file", `""`)
		setKey(t, e.hostConf, "mps_host_name", hostName)
		appendConf(t, e, "mps_inventory_ca_file: "+s.caFile+"\nmps_inventory_cert_file: "+f.Cert+"\nmps_inventory_key_file: "+f.Key+"\n")
		return e, addr, startDaemon(t, e)
	}
	_, addr, d := withCert("e2e-host", "e2e-host")
	waitStatus(t, addr, func(st status.Status) bool { return st.Ready && st.InventoryReachable }, d)
	l := listAll(t, url, "MPS_INVENTORY_CA_FILE="+s.caFile)
	if l.Total != 10 {
		t.Fatalf("devices registered with the client certificate: %d, want 10", l.Total)
	}
	out, errOut, code := run(t, append(mpsctlEnv(t, url), "MPS_INVENTORY_CA_FILE="+s.caFile), "mpsctl", "-o", "json", "host-list")
	var hl api.HostList
	if code != 0 || json.Unmarshal([]byte(out), &hl) != nil || hl.Total != 1 || hl.Hosts[0].Name != "e2e-host" || l.IsolatedDevices[0].HostID != hl.Hosts[0].ID {
		t.Errorf("hosts: exit %d %s%s", code, out, errOut)
	}

	_, addr, d = withCert("gpu-2", "gpu-3")
	st := waitStatus(t, addr, func(st status.Status) bool { return st.LastError != "" }, d)
	if !strings.Contains(st.LastError, "token for host gpu-2 may not register host gpu-3") || st.InventoryReachable {
		t.Errorf("a certificate of another host: %s", st.LastError)
	}
}
