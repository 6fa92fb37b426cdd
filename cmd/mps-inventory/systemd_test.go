package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/pki"
	"yunion.io/x/mps-daemon/pkg/inventory/server"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
	"yunion.io/x/mps-daemon/pkg/webtls"
)

// notes records sd_notify states in order; next blocks until the next one.
type notes struct {
	ch chan string
}

func newNotes() *notes { return &notes{ch: make(chan string, 64)} }

func (n *notes) notify(state string) error {
	n.ch <- state
	return nil
}

func (n *notes) next(t *testing.T) string {
	t.Helper()
	select {
	case s := <-n.ch:
		return s
	case <-t.Context().Done():
		t.Fatal("no sd_notify state before the test ended")
		return ""
	}
}

// none reports whether nothing was sent (everything sent before the call
// has been recorded by then: see the callers).
func (n *notes) none() (string, bool) {
	select {
	case s := <-n.ch:
		return s, false
	default:
		return "", true
	}
}

func TestProbeURL(t *testing.T) {
	for _, tc := range []struct{ listen, want string }{
		{"127.0.0.1:9330", "http://127.0.0.1:9330/healthz"},
		{"0.0.0.0:9330", "http://127.0.0.1:9330/healthz"},
		{"[::]:9330", "http://[::1]:9330/healthz"},
		{"[::1]:9330", "http://[::1]:9330/healthz"},
		{"10.1.2.3:80", "http://10.1.2.3:80/healthz"},
	} {
		t.Run(tc.listen, func(t *testing.T) {
			addr, err := net.ResolveTCPAddr("tcp", tc.listen)
			if err != nil {
				t.Fatal(err)
			}
			if got := probeURL(addr, "http"); got != tc.want {
				t.Errorf("probeURL(%s) = %s, want %s", tc.listen, got, tc.want)
			}
		})
	}
}

// TestWatchdogPingsOnlyWhileTheAPIAnswers: systemd restarts the server when
// the pings stop, so a tick whose probe fails must send none.
func TestWatchdogPingsOnlyWhileTheAPIAnswers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		status   int  // what /healthz answers
		gone     bool // nothing listens
		wantPing bool
	}{
		{name: "healthy", status: http.StatusOK, wantPing: true},
		{name: "answers 503", status: http.StatusServiceUnavailable},
		{name: "nothing listens", status: http.StatusOK, gone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/healthz" {
					http.NotFound(w, r)
					return
				}
				w.WriteHeader(tc.status)
			}))
			defer srv.Close()
			if tc.gone {
				srv.Close()
			}

			n := newNotes()
			ticks := make(chan time.Time) // unbuffered: a tick is taken once the previous one is done
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() {
				watchdog(ctx, prober{url: srv.URL + "/healthz", client: &http.Client{Timeout: 5 * time.Second}}, ticks, n.notify, slog.New(slog.DiscardHandler))
				close(done)
			}()
			ticks <- time.Now()
			if tc.wantPing {
				if got := n.next(t); got != "WATCHDOG=1" {
					t.Errorf("sent %q, want WATCHDOG=1", got)
				}
				cancel()
				<-done
				return
			}
			ticks <- time.Now() // taken only once the first tick was handled
			cancel()
			<-done
			if got, ok := n.none(); !ok {
				t.Errorf("sent %q, want nothing", got)
			}
		})
	}
}

// Behind a web configuration the probe speaks TLS to the loopback
// address (which the certificate need not name), and counts the
// toolkit's refusal of a client without password or certificate as the
// API answering; a 503 still is not.
func TestWatchdogProbesThroughTheWebConfig(t *testing.T) {
	ca := pki.NewCA(t, "site CA")
	dir := t.TempDir()
	// A certificate for the inventory's name only, not for 127.0.0.1.
	f := ca.Issue(t, pki.Leaf{DNS: []string{"inventory.example"}}).WriteFiles(t, dir, "server")
	clientCA := ca.WriteCA(t, filepath.Join(dir, "ca.crt"))
	tlsConf := "tls_server_config:\n  cert_file: " + f.Cert + "\n  key_file: " + f.Key + "\n"
	for _, tc := range []struct {
		name     string
		extra    string
		status   int
		wantPing bool
	}{
		{name: "TLS", status: http.StatusOK, wantPing: true},
		{name: "TLS, answers 503", status: http.StatusServiceUnavailable},
		{name: "basic auth", extra: "basic_auth_users:\n  " + pki.BasicAuthUser + ": " + pki.BasicAuthHash + "\n", status: http.StatusOK, wantPing: true},
		{name: "client certificates required", extra: "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: " + clientCA + "\n", status: http.StatusOK, wantPing: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wc, err := webtls.LoadWebConfig(pki.WebConfig(t, t.TempDir(), tlsConf+tc.extra))
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(tc.status) }), ReadHeaderTimeout: 5 * time.Second}
			go func() { _ = webtls.Serve(ln, srv, wc, slog.New(slog.DiscardHandler)) }()
			defer srv.Close()
			p := newProber(ln.Addr(), wc, 5*time.Second)
			if !strings.HasPrefix(p.url, "https://127.0.0.1:") {
				t.Fatalf("probe URL %s", p.url)
			}
			if err := p.probe(t.Context()); (err == nil) != tc.wantPing {
				t.Errorf("probe: %v, want alive %v", err, tc.wantPing)
			}
		})
	}
}

// TestReloadWritesTheAdminTokenFileAgain: `systemctl reload
// yunion-mps-inventory` after the admin token file was deleted gives root's
// climc a working token again, framed by RELOADING=1 and READY=1.
func TestReloadWritesTheAdminTokenFileAgain(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(t.Context(), filepath.Join(dir, "inventory.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tokenFile := filepath.Join(dir, "admin.token")
	log := slog.New(slog.DiscardHandler)
	reload := func(ctx context.Context) error { return server.EnsureAdminTokenFile(ctx, st, tokenFile, log) }
	if err := reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}

	n := newNotes()
	sigs := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go reloader(ctx, sigs, reload, n.notify, log)
	sigs <- syscall.SIGHUP

	if got := n.next(t); !strings.HasPrefix(got, "RELOADING=1\nMONOTONIC_USEC=") {
		t.Errorf("first state %q, want RELOADING=1 with MONOTONIC_USEC", got)
	}
	if got := n.next(t); got != "READY=1\nSTATUS=serving" {
		t.Errorf("second state %q, want READY=1 and STATUS=serving", got)
	}
	b, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatalf("the admin token file is not back: %v", err)
	}
	tok, err := st.VerifyToken(t.Context(), strings.TrimSpace(string(b)))
	if err != nil || tok.Role != store.RoleAdmin {
		t.Errorf("the new token file holds no admin token: %v (%+v)", err, tok)
	}
}

// TestFailedReloadKeepsServing: a reload that fails says so in STATUS= and
// still sends READY=1, so systemd does not keep the unit "reloading".
func TestFailedReloadKeepsServing(t *testing.T) {
	n := newNotes()
	sigs := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go reloader(ctx, sigs, func(context.Context) error { return errors.New("disk full") }, n.notify, slog.New(slog.DiscardHandler))
	sigs <- syscall.SIGHUP
	n.next(t) // RELOADING=1
	if got := n.next(t); got != "READY=1\nSTATUS=serving; last reload failed: disk full" {
		t.Errorf("after a failed reload: %q", got)
	}
}
