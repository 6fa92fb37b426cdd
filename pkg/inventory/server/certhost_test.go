package server

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/pki"
	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/client"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
	"yunion.io/x/mps-daemon/pkg/webtls"
)

// certServer serves the API over TLS, verifying client certificates of
// hostsCA when given (VerifyClientCertIfGiven), with HostCertificates as
// asked; it returns the URL and the site CA's file.
func certServer(t *testing.T, st *store.Store, hostsCA *pki.CA, hostCerts bool) (string, string) {
	t.Helper()
	site := pki.NewCA(t, "site CA")
	leaf := site.Issue(t, pki.Leaf{})
	cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(New(st, Options{HostCertificates: hostCerts}, slog.New(slog.DiscardHandler)))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pki.Pool(hostsCA)}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, site.WriteCA(t, filepath.Join(t.TempDir(), "ca.crt"))
}

// A host's client certificate (its common name the host's name) stands
// for a host token of that host: it registers its host and devices, and
// is refused what a host token is refused, by the same 403s.
func TestHostCertificateActsAsAHostToken(t *testing.T) {
	st := storetest.Open(t, storetest.Backends()[0].DSN(t))
	hostsCA := pki.NewCA(t, "hosts CA")
	url, caFile := certServer(t, st, hostsCA, true)
	dir := t.TempDir()
	gpu1 := hostsCA.Issue(t, pki.Leaf{CommonName: "gpu-1", Client: true}).WriteFiles(t, dir, "gpu-1")
	c := client.New(client.Options{URL: url, Retries: -1,
		HTTPClient: webtls.Client{CAFile: caFile, CertFile: gpu1.Cert, KeyFile: gpu1.Key}.HTTPClient()})
	ctx := t.Context()

	h, err := c.EnsureHost(ctx, "gpu-1")
	if err != nil || h.Name != "gpu-1" {
		t.Fatalf("gpu-1 registering itself with its certificate: %+v %v", h, err)
	}
	if _, err := c.CreateIsolatedDevice(ctx, api.IsolatedDevice{HostID: h.ID, DevType: api.DevTypeNvidiaMPS, Addr: "18:00.0-0", VendorDeviceID: "10de:2330"}); err != nil {
		t.Fatalf("creating its device: %v", err)
	}
	for _, tt := range []struct {
		name string
		do   func() error
		want string
	}{
		{"another host", func() error { _, err := c.CreateHost(ctx, api.Host{Name: "gpu-2"}); return err }, "token for host gpu-1 may not register host gpu-2"},
		{"attach", func() error {
			_, err := c.AttachIsolatedDevice(ctx, "guest-1", "18:00.0-0")
			return err
		}, "role host may not POST /servers/guest-1/attach-isolated-device"},
	} {
		err := tt.do()
		if ae, ok := errors.AsType[*client.APIError](err); !ok || ae.Status != http.StatusForbidden || !strings.Contains(ae.Details, tt.want) {
			t.Errorf("%s: %v, want 403 %q", tt.name, err, tt.want)
		}
	}

	// Without a certificate or token, 401; with a certificate whose
	// common name is no host name, 401 saying so.
	anon := client.New(client.Options{URL: url, Retries: -1, HTTPClient: webtls.Client{CAFile: caFile}.HTTPClient()})
	if _, err := anon.ListHosts(ctx, client.ListHostsOptions{}); !unauthorized(err) {
		t.Errorf("no certificate: %v", err)
	}
	odd := hostsCA.Issue(t, pki.Leaf{CommonName: "gpu/1", Client: true}).WriteFiles(t, dir, "odd")
	bad := client.New(client.Options{URL: url, Retries: -1, HTTPClient: webtls.Client{CAFile: caFile, CertFile: odd.Cert, KeyFile: odd.Key}.HTTPClient()})
	if _, err := bad.ListHosts(ctx, client.ListHostsOptions{}); !unauthorized(err) || !strings.Contains(err.Error(), `its subject's common name "gpu/1" is no host name`) {
		t.Errorf("a certificate naming no host: %v", err)
	}
}

// Without HostCertificates a verified certificate authenticates nothing.
func TestHostCertificatesOffByDefault(t *testing.T) {
	st := storetest.Open(t, storetest.Backends()[0].DSN(t))
	hostsCA := pki.NewCA(t, "hosts CA")
	url, caFile := certServer(t, st, hostsCA, false)
	f := hostsCA.Issue(t, pki.Leaf{CommonName: "gpu-1", Client: true}).WriteFiles(t, t.TempDir(), "gpu-1")
	c := client.New(client.Options{URL: url, Retries: -1, HTTPClient: webtls.Client{CAFile: caFile, CertFile: f.Cert, KeyFile: f.Key}.HTTPClient()})
	if _, err := c.EnsureHost(t.Context(), "gpu-1"); !unauthorized(err) {
		t.Errorf("a certificate without HostCertificates: %v", err)
	}
}

func unauthorized(err error) bool {
	ae, ok := errors.AsType[*client.APIError](err)
	return ok && ae.Status == http.StatusUnauthorized
}
