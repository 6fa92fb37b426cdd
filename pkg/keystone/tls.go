package keystone

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"time"
)

// NewHTTPClient returns the HTTP client for keystone and the region: TLS
// verified against the system's roots plus the PEM certificates caPEM
// (the content of host.conf's ssl_ca_certs, when set); insecure (host.conf's
// mps_region_insecure_tls, off by default) skips verification, which
// Cloudpods' own agents always do. Each request is bounded by the caller's
// context; the transport bounds connecting and the TLS handshake.
func NewHTTPClient(caPEM []byte, insecure bool) (*http.Client, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	switch {
	case insecure:
		cfg.InsecureSkipVerify = true //nolint:gosec // an explicit operator setting, off by default
	case caPEM != nil:
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, errors.New("ssl_ca_certs holds no PEM certificate")
		}
		cfg.RootCAs = pool
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       cfg,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   4,
	}
	return &http.Client{Transport: tr}, nil
}
