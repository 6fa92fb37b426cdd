package webtls_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/pki"
	"yunion.io/x/mps-daemon/pkg/webtls"
)

// site is a site CA with a server certificate for localhost written in a
// directory, and a web configuration file serving it.
type site struct {
	dir    string
	ca     *pki.CA
	server pki.Files
	caFile string
}

func newSite(t testing.TB) *site {
	t.Helper()
	s := &site{dir: t.TempDir(), ca: pki.NewCA(t, "site CA")}
	s.server = s.ca.Issue(t, pki.Leaf{}).WriteFiles(t, s.dir, "server")
	s.caFile = s.ca.WriteCA(t, filepath.Join(s.dir, "ca.crt"))
	return s
}

// webConfig writes the web configuration file: TLS with the site's
// server certificate, then extra (YAML at the top level or under
// tls_server_config, as the caller indents it).
func (s *site) webConfig(t testing.TB, extra string) webtls.WebConfig {
	t.Helper()
	path := pki.WebConfig(t, s.dir, fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n%s", s.server.Cert, s.server.Key, extra))
	wc, err := webtls.LoadWebConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	return wc
}

// echo answers the serial of the client's certificate, or "none".
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		_, _ = io.WriteString(w, r.TLS.PeerCertificates[0].SerialNumber.Text(16))
		return
	}
	_, _ = io.WriteString(w, "none")
})

// get fetches url and returns the status, body, the serial of the
// server's certificate and whether the connection was reused.
func get(t *testing.T, c *http.Client, url string, auth ...string) (int, string, string, bool, error) {
	t.Helper()
	var reused bool
	ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(auth) == 2 {
		req.SetBasicAuth(auth[0], auth[1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", "", false, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	serial := ""
	if resp.TLS != nil {
		serial = resp.TLS.PeerCertificates[0].SerialNumber.Text(16)
	}
	return resp.StatusCode, string(b), serial, reused, nil
}

func TestNoWebConfigServesPlainHTTP(t *testing.T) {
	wc, err := webtls.LoadWebConfig("")
	if err != nil || wc.TLS || wc.Scheme() != "http" {
		t.Fatalf("no file: %+v %v", wc, err)
	}
	addr := pki.Serve(t, wc, echo)
	if code, body, _, _, err := get(t, &http.Client{}, "http://"+addr+"/"); err != nil || code != 200 || body != "none" {
		t.Fatalf("plain GET: %d %q %v", code, body, err)
	}
}

// The site's CA file verifies the server; the answer comes over TLS.
func TestServesHTTPSVerifiedAgainstTheCAFile(t *testing.T) {
	s := newSite(t)
	wc := s.webConfig(t, "")
	if !wc.TLS || wc.Scheme() != "https" || wc.CertFile != s.server.Cert {
		t.Fatalf("web config: %+v", wc)
	}
	addr := pki.Serve(t, wc, echo)
	c := webtls.Client{CAFile: s.caFile, CASetting: "mps_inventory_ca_file"}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	code, body, serial, _, err := get(t, c.HTTPClient(), "https://"+addr+"/")
	if err != nil || code != 200 || body != "none" || serial == "" {
		t.Fatalf("GET over TLS: %d %q %q %v", code, body, serial, err)
	}
	// The name in the certificate too, not only its address.
	_, port, _ := net.SplitHostPort(addr)
	if code, _, _, _, err := get(t, c.HTTPClient(), "https://localhost:"+port+"/"); err != nil || code != 200 {
		t.Fatalf("GET https://localhost: %d %v", code, err)
	}
}

// The listener with TLS answers a plain request with Go's 400, which the
// client tells as what it is.
func TestPlainHTTPToTheTLSPortIsToldAsSuch(t *testing.T) {
	s := newSite(t)
	addr := pki.Serve(t, s.webConfig(t, ""), echo)
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r := webtls.PlainToTLS(resp.StatusCode, body)
	if r == nil || !strings.Contains(r.Error(), "make it https://") {
		t.Fatalf("answer %d %q: refusal %v", resp.StatusCode, body, r)
	}
	if webtls.PlainToTLS(400, []byte(`{"error": "bad request"}`)) != nil {
		t.Error("an API's 400 read as plain HTTP to a TLS port")
	}
}

// Each certificate a client must refuse, refused with one cause naming
// what is wrong.
func TestRefusals(t *testing.T) {
	s := newSite(t)
	other := pki.NewCA(t, "another CA")
	otherFile := other.WriteCA(t, filepath.Join(s.dir, "other-ca.crt"))
	// A server per certificate under test, each from its own directory.
	serveWith := func(t *testing.T, leaf pki.Issued) string {
		dir := t.TempDir()
		f := leaf.WriteFiles(t, dir, "server")
		wc, err := webtls.LoadWebConfig(pki.WebConfig(t, dir, fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n", f.Cert, f.Key)))
		if err != nil {
			t.Fatal(err)
		}
		return pki.Serve(t, wc, echo)
	}
	plainLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plainSrv := &http.Server{Handler: echo, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = plainSrv.Serve(plainLn) }()
	t.Cleanup(func() { _ = plainSrv.Close() })

	for _, tt := range []struct {
		name   string
		addr   func(t *testing.T) string
		caFile string
		want   []string
	}{
		{"another CA", func(t *testing.T) string { return serveWith(t, s.ca.Issue(t, pki.Leaf{})) }, otherFile,
			[]string{`signed by "CN=site CA`, "not by a CA of " + otherFile + " (mps_inventory_ca_file)"}},
		{"the system's roots", func(t *testing.T) string { return serveWith(t, s.ca.Issue(t, pki.Leaf{})) }, "",
			[]string{"not by a CA of the system's roots"}},
		{"expired", func(t *testing.T) string {
			return serveWith(t, s.ca.Issue(t, pki.Leaf{NotBefore: time.Now().Add(-3 * time.Hour), NotAfter: time.Now().Add(-2 * time.Hour)}))
		}, s.caFile, []string{"expired at "}},
		{"not yet valid", func(t *testing.T) string {
			return serveWith(t, s.ca.Issue(t, pki.Leaf{NotBefore: time.Now().Add(2 * time.Hour), NotAfter: time.Now().Add(3 * time.Hour)}))
		}, s.caFile, []string{"is not valid before ", "clock"}},
		{"another host name", func(t *testing.T) string {
			return serveWith(t, s.ca.Issue(t, pki.Leaf{DNS: []string{"inventory.example"}}))
		}, s.caFile, []string{"is for inventory.example, not for \"127.0.0.1\""}},
		{"plain HTTP port", func(*testing.T) string { return plainLn.Addr().String() }, s.caFile,
			[]string{"does not speak TLS at this address"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr := tt.addr(t)
			// Without a CA file, the plain client of the system's roots.
			c := webtls.Client{CAFile: tt.caFile, CASetting: "mps_inventory_ca_file"}
			_, _, _, _, err := get(t, c.HTTPClient(), "https://"+addr+"/")
			r := webtls.Refusal(err, "the system's roots")
			if r == nil {
				t.Fatalf("not told as a refusal: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.Error(), w) {
					t.Errorf("the refusal does not say %q: %v", w, r)
				}
			}
			if server := tt.name != "plain HTTP port"; r.ServerCertificate != server {
				t.Errorf("ServerCertificate %v, want %v: %v", r.ServerCertificate, server, r)
			}
			t.Log(r)
			if strings.Contains(r.Error(), "\n") {
				t.Errorf("more than one line: %q", r)
			}
		})
	}
}

// Certificates replaced on disk are served from the next handshake on,
// with no restart, while a connection made before goes on.
func TestCertificateRotatedWhileClientsStayConnected(t *testing.T) {
	s := newSite(t)
	addr := pki.Serve(t, s.webConfig(t, ""), echo)
	c := webtls.Client{CAFile: s.caFile}
	kept := c.HTTPClient()
	_, _, first, _, err := get(t, kept, "https://"+addr+"/")
	if err != nil {
		t.Fatal(err)
	}

	renewed := s.ca.Issue(t, pki.Leaf{})
	renewed.WriteFiles(t, s.dir, "server")
	// The connection kept alive goes on with the certificate it was made
	// with...
	code, _, serial, reused, err := get(t, kept, "https://"+addr+"/")
	if err != nil || code != 200 || !reused || serial != first {
		t.Fatalf("kept connection after the renewal: %d reused=%v serial %s (first %s) %v", code, reused, serial, first, err)
	}
	// ... a new one gets the renewed certificate.
	_, _, serial, reused, err = get(t, c.HTTPClient(), "https://"+addr+"/")
	if err != nil || reused || serial != renewed.Cert.SerialNumber.Text(16) {
		t.Fatalf("new connection: serial %s, want the renewed %s (reused=%v) %v", serial, renewed.Cert.SerialNumber.Text(16), reused, err)
	}

	// A new site CA: the server's certificate and the clients' CA file
	// both replaced, the server first; the client keeps trusting the old
	// CA until its file changes, then trusts the new one, with no
	// restart of either.
	next := pki.NewCA(t, "site CA 2026")
	next.Issue(t, pki.Leaf{}).WriteFiles(t, s.dir, "server")
	fresh := c.HTTPClient()
	if _, _, _, _, err := get(t, fresh, "https://"+addr+"/"); webtls.Refusal(err, "") == nil {
		t.Fatalf("the old CA accepted the new CA's certificate: %v", err)
	}
	next.WriteCA(t, s.caFile)
	if code, _, _, _, err := get(t, fresh, "https://"+addr+"/"); err != nil || code != 200 {
		t.Fatalf("after the CA file was replaced: %d %v", code, err)
	}
}

// A server certificate whose new key is not written yet (a renewal
// between its two files) fails that handshake only; the listener goes
// on and serves the pair once it is whole.
func TestHalfRenewedCertificateFailsOnlyThoseHandshakes(t *testing.T) {
	s := newSite(t)
	addr := pki.Serve(t, s.webConfig(t, ""), echo)
	c := webtls.Client{CAFile: s.caFile}
	renewed := s.ca.Issue(t, pki.Leaf{})
	pki.Replace(t, s.server.Cert, renewed.CertPEM) // the key still the old one
	if _, _, _, _, err := get(t, c.HTTPClient(), "https://"+addr+"/"); err == nil {
		t.Fatal("a certificate with another's key was served")
	}
	pki.Replace(t, s.server.Key, renewed.KeyPEM)
	if code, _, serial, _, err := get(t, c.HTTPClient(), "https://"+addr+"/"); err != nil || code != 200 || serial != renewed.Cert.SerialNumber.Text(16) {
		t.Fatalf("after the key: %d %s %v", code, serial, err)
	}
}

func TestBasicAuth(t *testing.T) {
	s := newSite(t)
	wc := s.webConfig(t, fmt.Sprintf("basic_auth_users:\n  %s: %s\n", pki.BasicAuthUser, pki.BasicAuthHash))
	if wc.Users != 1 {
		t.Fatalf("users: %+v", wc)
	}
	addr := pki.Serve(t, wc, echo)
	hc := webtls.Client{CAFile: s.caFile}.HTTPClient()
	for _, tt := range []struct {
		auth []string
		want int
	}{
		{nil, 401},
		{[]string{pki.BasicAuthUser, "wrong"}, 401},
		{[]string{"nobody", pki.BasicAuthPassword}, 401},
		{[]string{pki.BasicAuthUser, pki.BasicAuthPassword}, 200},
	} {
		if code, _, _, _, err := get(t, hc, "https://"+addr+"/", tt.auth...); err != nil || code != tt.want {
			t.Errorf("auth %v: %d %v, want %d", tt.auth, code, err, tt.want)
		}
	}
}

// Client certificates: required and verified against client_ca_file;
// none, or one of another CA, refused with the cause; a client
// certificate renewed on disk presented from the next connection on.
func TestClientCertificates(t *testing.T) {
	s := newSite(t)
	hosts := pki.NewCA(t, "hosts CA")
	hostsFile := hosts.WriteCA(t, filepath.Join(s.dir, "hosts-ca.crt"))
	wc := s.webConfig(t, fmt.Sprintf("  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: %s\n", hostsFile))
	if !wc.ClientCertificates() {
		t.Fatalf("client certificates: %+v", wc)
	}
	addr := pki.Serve(t, wc, echo)
	dir := t.TempDir()
	gpu1 := hosts.Issue(t, pki.Leaf{CommonName: "gpu-1", Client: true})
	f := gpu1.WriteFiles(t, dir, "gpu-1")
	c := webtls.Client{CAFile: s.caFile, CertFile: f.Cert, KeyFile: f.Key}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	if _, body, _, _, err := get(t, c.HTTPClient(), "https://"+addr+"/"); err != nil || body != gpu1.Cert.SerialNumber.Text(16) {
		t.Fatalf("with gpu-1's certificate: %q %v", body, err)
	}
	renewed := hosts.Issue(t, pki.Leaf{CommonName: "gpu-1", Client: true})
	renewed.WriteFiles(t, dir, "gpu-1")
	if _, body, _, _, err := get(t, c.HTTPClient(), "https://"+addr+"/"); err != nil || body != renewed.Cert.SerialNumber.Text(16) {
		t.Fatalf("after the renewal: %q %v", body, err)
	}

	_, _, _, _, err := get(t, webtls.Client{CAFile: s.caFile}.HTTPClient(), "https://"+addr+"/")
	if r := webtls.Refusal(err, ""); r == nil || !strings.Contains(r.Cause, "requires a client certificate") {
		t.Errorf("no certificate: %v", err)
	}
	stranger := s.ca.Issue(t, pki.Leaf{CommonName: "gpu-1", Client: true}).WriteFiles(t, dir, "stranger")
	_, _, _, _, err = get(t, webtls.Client{CAFile: s.caFile, CertFile: stranger.Cert, KeyFile: stranger.Key}.HTTPClient(), "https://"+addr+"/")
	if r := webtls.Refusal(err, ""); r == nil || !strings.Contains(r.Cause, "did not accept this client's certificate") || !r.ClientCertificate || r.ServerCertificate {
		t.Errorf("a certificate of another CA: %v", err)
	}
}

func TestLoadWebConfigRefusals(t *testing.T) {
	s := newSite(t)
	fifo := filepath.Join(s.dir, "fifo.crt")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(s.dir, "big.yml")
	if err := os.WriteFile(big, make([]byte, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, body string
		want       []string
	}{
		{"misspelt key", "tls_server_config:\n  cert_flie: x\n", []string{"web.yml", "cert_flie"}},
		{"missing certificate", "tls_server_config:\n  cert_file: nope.crt\n  key_file: " + s.server.Key + "\n", []string{"cert_file", "nope.crt"}},
		{"certificate without key", "tls_server_config:\n  cert_file: " + s.server.Cert + "\n", []string{"missing one of key or key_file"}},
		{"a FIFO as certificate", "tls_server_config:\n  cert_file: " + fifo + "\n  key_file: " + s.server.Key + "\n", []string{"cert_file", "a FIFO"}},
		{"key of another certificate", "tls_server_config:\n  cert_file: " + s.server.Cert + "\n  key_file: " + s.ca.Issue(t, pki.Leaf{}).WriteFiles(t, t.TempDir(), "x").Key + "\n", []string{"private key does not match public key"}},
		{"not a bcrypt hash", "basic_auth_users:\n  prometheus: s3cret\n", []string{"web.yml", "hash"}},
		{"unknown client auth", "tls_server_config:\n  cert_file: " + s.server.Cert + "\n  key_file: " + s.server.Key + "\n  client_auth_type: Always\n", []string{"invalid ClientAuth"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := webtls.LoadWebConfig(pki.WebConfig(t, t.TempDir(), tt.body))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q: %v", w, err)
				}
			}
		})
	}
	if _, err := webtls.LoadWebConfig(big); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("a 2 MiB file: %v", err)
	}
	if _, err := webtls.LoadWebConfig(fifo); err == nil || !strings.Contains(err.Error(), "a FIFO") {
		t.Errorf("a FIFO as the file: %v", err)
	}
	if _, err := webtls.LoadWebConfig(filepath.Join(s.dir, "absent.yml")); err == nil || !strings.Contains(err.Error(), "absent.yml") {
		t.Errorf("an absent file: %v", err)
	}
}

func TestClientCheckNamesTheSetting(t *testing.T) {
	s := newSite(t)
	for _, tt := range []struct {
		name string
		c    webtls.Client
		want string
	}{
		{"absent CA file", webtls.Client{CAFile: filepath.Join(s.dir, "nope.pem"), CASetting: "mps_inventory_ca_file"}, "mps_inventory_ca_file: open " + filepath.Join(s.dir, "nope.pem")},
		{"no certificate in it", webtls.Client{CAFile: s.server.Key, CASetting: "--ca-file"}, "--ca-file " + s.server.Key + ": no PEM certificate"},
		{"certificate without key", webtls.Client{CertFile: s.server.Cert, CertSetting: "mps_inventory_cert_file"}, "mps_inventory_cert_file: give both"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.c.Check(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Check: %v, want %q", err, tt.want)
			}
		})
	}
}

func TestInClear(t *testing.T) {
	tls := webtls.WebConfig{TLS: true}
	for _, tt := range []struct {
		addr  string
		clear bool
	}{
		{"127.0.0.1:9330", false},
		{"[::1]:9330", false},
		{"0.0.0.0:9330", true},
		{"[::]:9330", true},
		{"10.0.0.5:9330", true},
	} {
		a, err := net.ResolveTCPAddr("tcp", tt.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := (webtls.WebConfig{}).InClear(a); got != tt.clear {
			t.Errorf("plain on %s: in clear %v, want %v", tt.addr, got, tt.clear)
		}
		if tls.InClear(a) {
			t.Errorf("TLS on %s counted in clear", tt.addr)
		}
	}
}

// A local tool trusts exactly the certificate the listener's web
// configuration names, whatever names it holds (it dials loopback); a
// listener serving another certificate is refused.
func TestLocalClientPinsTheListenersCertificate(t *testing.T) {
	s := newSite(t)
	// A certificate for the host's name only: not for 127.0.0.1.
	named := s.ca.Issue(t, pki.Leaf{DNS: []string{"gpu-1.example"}}).WriteFiles(t, s.dir, "named")
	path := pki.WebConfig(t, t.TempDir(), fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n", named.Cert, named.Key))
	wc, err := webtls.LoadWebConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	addr := pki.Serve(t, wc, echo)
	c, err := wc.LocalClient(webtls.Client{})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, _, _, err := get(t, c, "https://"+addr+"/"); err != nil || code != 200 {
		t.Fatalf("the listener's own certificate: %d %v", code, err)
	}
	// Another listener, of another certificate of the same CA: refused.
	other := pki.Serve(t, s.webConfig(t, ""), echo)
	_, _, _, _, err = get(t, c, "https://"+other+"/")
	if r := webtls.Refusal(err, ""); r == nil || !strings.Contains(r.Cause, "serves another certificate than its web configuration") {
		t.Errorf("another certificate: %v", err)
	}
	// Without TLS, a plain client.
	if c, err := (webtls.WebConfig{}).LocalClient(webtls.Client{}); err != nil || c.Transport != nil {
		t.Errorf("plain: %+v %v", c, err)
	}
}
