package webtls_test

import (
	"fmt"
	"io"
	"net/http"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/pki"
	"yunion.io/x/mps-daemon/pkg/webtls"
)

// What a request costs through the web configuration, on a connection
// kept alive (docs/benchmarks.md, "TLS"): exporter-toolkit reads and parses
// the web configuration file at every request (so a changed password
// applies at once) and, over TLS, the certificate at every handshake.
// plain: no file; tls: TLS; tls+basic-auth: TLS and a bcrypt user (the
// toolkit caches a checked password).
func BenchmarkRequest(b *testing.B) {
	for _, bc := range []struct {
		name  string
		setup func(b *testing.B) (webtls.WebConfig, *http.Client, []string)
	}{
		{"plain", func(*testing.B) (webtls.WebConfig, *http.Client, []string) {
			return webtls.WebConfig{}, &http.Client{}, nil
		}},
		{"tls", func(b *testing.B) (webtls.WebConfig, *http.Client, []string) {
			s := newSite(b)
			return s.webConfig(b, ""), webtls.Client{CAFile: s.caFile}.HTTPClient(), nil
		}},
		{"tls+basic-auth", func(b *testing.B) (webtls.WebConfig, *http.Client, []string) {
			s := newSite(b)
			return s.webConfig(b, fmt.Sprintf("basic_auth_users:\n  %s: %s\n", pki.BasicAuthUser, pki.BasicAuthHash)), webtls.Client{CAFile: s.caFile}.HTTPClient(), []string{pki.BasicAuthUser, pki.BasicAuthPassword}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			wc, c, auth := bc.setup(b)
			addr := pki.Serve(b, wc, echo)
			url := wc.Scheme() + "://" + addr + "/"
			req, err := http.NewRequest(http.MethodGet, url, nil)
			if err != nil {
				b.Fatal(err)
			}
			if auth != nil {
				req.SetBasicAuth(auth[0], auth[1])
			}
			b.ResetTimer()
			for b.Loop() {
				resp, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}
