package webtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Client is what a client of a TLS server trusts and what it presents.
// Its files are read again at each new connection (a connection kept
// alive goes on with what it was made with), so a site CA bundle or a
// client certificate renewed on disk is used with no restart.
type Client struct {
	// CAFile holds the PEM certificates of the CAs that may sign the
	// server's certificate, and only those; empty: the system's roots.
	CAFile string
	// CertFile and KeyFile are the client certificate (PEM, the leaf
	// first, intermediates after it) and its key, presented when the
	// server asks for one; both or neither.
	CertFile, KeyFile string
	// CASetting names where CAFile comes from in messages
	// (mps_inventory_ca_file, --ca-file); CertSetting likewise.
	CASetting, CertSetting string
}

// Configured says whether any file is set: otherwise the client is a
// plain one that trusts the system's roots.
func (c Client) Configured() bool { return c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" }

// Check reads every file once, as a connection will: a start (and
// check-config) refuses a missing, unreadable or broken one by name
// instead of failing every connection later.
func (c Client) Check() error {
	if (c.CertFile == "") != (c.KeyFile == "") {
		return fmt.Errorf("%s: give both the certificate and its key, or neither", c.certSetting())
	}
	if _, err := c.roots(); err != nil {
		return err
	}
	_, err := c.certificate()
	return err
}

// HTTPClient is an HTTP client that verifies servers against CAFile and
// presents the client certificate. Without files it is a plain client
// (the system's roots, the environment's proxy). With them, https://
// connections are made by the client itself and go to the server
// directly, not through a proxy: what is verified is what CAFile says.
// Its Timeout is 0: callers bound each exchange.
func (c Client) HTTPClient() *http.Client {
	if !c.Configured() {
		return &http.Client{}
	}
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{Transport: &http.Transport{
		DialContext: d.DialContext,
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return c.dialTLS(ctx, d, network, addr)
		},
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}}
}

// handshakeTimeout bounds a TLS handshake.
const handshakeTimeout = 10 * time.Second

// dialTLS connects to addr and makes the TLS handshake with the files as
// they are now.
func (c Client) dialTLS(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	cfg, err := c.config(host)
	if err != nil {
		return nil, err
	}
	raw, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	conn := tls.Client(raw, cfg)
	if err := conn.HandshakeContext(hctx); err != nil {
		_ = raw.Close()
		if r := Refusal(err, c.trust()); r != nil {
			return nil, r
		}
		return nil, err
	}
	return conn, nil
}

// config is the TLS configuration of one connection to host.
func (c Client) config(host string) (*tls.Config, error) {
	roots, err := c.roots()
	if err != nil {
		return nil, err
	}
	cert, err := c.certificate()
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, ServerName: host}
	if cert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return cfg, nil
}

// roots are CAFile's certificates; nil (the system's roots) without it.
func (c Client) roots() (*x509.CertPool, error) {
	if c.CAFile == "" {
		return nil, nil
	}
	data, err := readRegular(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.caSetting(), err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s %s: no PEM certificate in it", c.caSetting(), c.CAFile)
	}
	return pool, nil
}

// certificate is the client certificate; nil without one.
func (c Client) certificate() (*tls.Certificate, error) {
	if c.CertFile == "" || c.KeyFile == "" {
		return nil, nil
	}
	certPEM, err := readRegular(c.CertFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.certSetting(), err)
	}
	keyPEM, err := readRegular(c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.certSetting(), err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s %s and %s: %w", c.certSetting(), c.CertFile, c.KeyFile, err)
	}
	return &cert, nil
}

// trust says what the client trusts, for a refusal's cause.
func (c Client) trust() string {
	if c.CAFile == "" {
		return "the system's roots"
	}
	return fmt.Sprintf("%s (%s)", c.CAFile, c.caSetting())
}

func (c Client) caSetting() string {
	if c.CASetting == "" {
		return "CA file"
	}
	return c.CASetting
}

func (c Client) certSetting() string {
	if c.CertSetting == "" {
		return "client certificate"
	}
	return c.CertSetting
}
