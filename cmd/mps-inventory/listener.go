package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"yunion.io/x/mps-daemon/pkg/webtls"
)

// listen reads the API's web configuration (--web.config.file: TLS,
// client certificates, basic auth, as node_exporter takes it), checks it
// against the inventory's flags and opens its listener (webtls.Listener,
// as the daemon opens its own). A listener beyond loopback without TLS
// is one warning saying what crosses the network in clear.
func listen(f flags, log *slog.Logger) (net.Listener, webtls.WebConfig, error) {
	l := webtls.Listener{Address: f.listen, WebConfigFile: f.webConfigFile, WebConfigSetting: "--web.config.file",
		InClear: "serving plain HTTP beyond loopback: every host's, mpsctl's and climc's token, climc's keystone passwords and the inventory's answers cross the network in clear; whoever reads it can register devices for a host, attach and detach others' devices and read the fleet. Give --web.config.file with tls_server_config (docs/operations.md, \"TLS\")"}
	wc, err := l.Check()
	if err != nil {
		return nil, wc, err
	}
	if wc.TLS && strings.HasPrefix(strings.ToLower(f.publicURL), "http://") {
		return nil, wc, fmt.Errorf("--public-url %s: the inventory serves only HTTPS (--web.config.file %s), and the catalog would send climc to plain HTTP", f.publicURL, wc.Path)
	}
	if wc.Users > 0 {
		return nil, wc, fmt.Errorf("--web.config.file %s: basic_auth_users: the inventory's clients (mps-daemon, mpsctl, climc) authenticate with API and keystone tokens, which basic auth would shut out; leave basic_auth_users out (tokens, and client certificates, are the inventory's authentication)", wc.Path)
	}
	if f.hostCerts && !wc.ClientCertificates() {
		return nil, wc, errors.New("--host-certificates: the web configuration (--web.config.file) must verify client certificates: client_auth_type VerifyClientCertIfGiven or RequireAndVerifyClientCert, with client_ca_file")
	}
	ln, err := l.Listen(wc, log)
	return ln, wc, err
}

// probeClient is how the watchdog reaches the API it serves: plain HTTP,
// or HTTPS without checking the certificate. The probe dials loopback,
// which the certificate need not name, sends no secret and only asks
// whether the API answers.
func probeClient(wc webtls.WebConfig) *http.Client {
	if !wc.TLS {
		return &http.Client{}
	}
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a liveness probe of our own listener on loopback
	}}
}
