package webtls

import (
	"bytes"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
)

// LocalClient is a client of the listener wc configures, run on the same
// host by someone who may read its web configuration (`mps-daemon
// status`, as root): over TLS it trusts exactly the certificate the
// listener serves (cert_file, read again at each handshake), whatever
// names that certificate has, since a local tool reaches the listener at
// a loopback address the certificate need not name. cert presents a
// client certificate when the listener asks for one (its CertFile and
// KeyFile; CAFile is not used). Without TLS it is a plain client.
func (wc WebConfig) LocalClient(cert Client) (*http.Client, error) {
	if !wc.TLS {
		return &http.Client{}, nil
	}
	if err := cert.Check(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The chain is not verified: the one certificate the listener is
		// configured with is compared, byte for byte (VerifyConnection).
		InsecureSkipVerify: true, //nolint:gosec // pinned to the listener's own certificate below
		VerifyConnection: func(cs tls.ConnectionState) error {
			want, err := wc.servedLeaf()
			if err != nil {
				return err
			}
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, want) {
				return &RefusedError{Cause: fmt.Sprintf("the listener serves another certificate than its web configuration %s names", wc.Path)}
			}
			return nil
		},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := cert.certificate()
			if err != nil || c == nil {
				return &tls.Certificate{}, err // none: the server decides
			}
			return c, nil
		},
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}, nil
}

// servedLeaf is the DER of the first certificate of cert_file (or of the
// inline cert).
func (wc WebConfig) servedLeaf() ([]byte, error) {
	data := []byte(wc.certPEM)
	if wc.CertFile != "" {
		var err error
		if data, err = readRegular(wc.CertFile); err != nil {
			return nil, fmt.Errorf("web config file %s: tls_server_config.cert_file: %w", wc.Path, err)
		}
	}
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, errors.New("web config file " + wc.Path + ": no certificate in tls_server_config's cert_file or cert")
		}
		if b.Type == "CERTIFICATE" {
			return b.Bytes, nil
		}
	}
}
