// Package pki makes the certificates TLS tests need, with Go's crypto and
// nothing else: a site CA, server and client certificates it signs (valid,
// expired, not yet valid, for another name), written as PEM files the way
// an operator's openssl commands write them (docs/operations.md, "A site CA
// and per-host certificates"), and a web configuration file pointing at
// them, and Serve, a handler served through pkg/webtls until the test
// ends. Every key is ECDSA P-256: quick to make, as a test makes dozens.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"path/filepath"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/atomicfile"
)

// CA is a certificate authority of one test.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA's certificate, what a client's CA file holds.
	PEM []byte
}

// NewCA makes a self-signed CA named name, valid from an hour ago for a
// day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"mps-daemon tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Leaf says what certificate to issue. The zero value is a server
// certificate for localhost and 127.0.0.1, valid from an hour ago for a
// day.
type Leaf struct {
	// CommonName defaults to the first DNS name, else "test".
	CommonName string
	// DNS and IPs are the subject alternative names; both empty means
	// localhost and 127.0.0.1 (and ::1).
	DNS []string
	IPs []net.IP
	// NotBefore and NotAfter default to an hour ago and a day from now.
	NotBefore, NotAfter time.Time
	// Client issues a client certificate (extended key usage clientAuth)
	// instead of a server one.
	Client bool
}

// Issued is a certificate and its key, in PEM.
type Issued struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// Issue signs a certificate as l says.
func (ca *CA) Issue(t testing.TB, l Leaf) Issued {
	t.Helper()
	if len(l.DNS) == 0 && len(l.IPs) == 0 && !l.Client {
		l.DNS = []string{"localhost"}
		l.IPs = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	if l.CommonName == "" {
		l.CommonName = "test"
		if len(l.DNS) > 0 {
			l.CommonName = l.DNS[0]
		}
	}
	if l.NotBefore.IsZero() {
		l.NotBefore = time.Now().Add(-time.Hour)
	}
	if l.NotAfter.IsZero() {
		l.NotAfter = time.Now().Add(24 * time.Hour)
	}
	usage := x509.ExtKeyUsageServerAuth
	if l.Client {
		usage = x509.ExtKeyUsageClientAuth
	}
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: l.CommonName},
		DNSNames:     l.DNS,
		IPAddresses:  l.IPs,
		NotBefore:    l.NotBefore,
		NotAfter:     l.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return Issued{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}
}

// Files are where WriteFiles put a certificate and its key.
type Files struct{ Cert, Key string }

// WriteFiles writes the certificate and key as dir/name.crt and
// dir/name.key (0600), each replaced whole (written aside and renamed),
// as a renewal tool does: a reader never sees half a file.
func (i Issued) WriteFiles(t testing.TB, dir, name string) Files {
	t.Helper()
	f := Files{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}
	// The key first: a handshake between the two writes then pairs the
	// old certificate with the new key and fails, rather than the
	// other way round, which fails the same; renewal tools do the same.
	Replace(t, f.Key, i.KeyPEM)
	Replace(t, f.Cert, i.CertPEM)
	return f
}

// WriteCA writes the CA's certificate to path.
func (ca *CA) WriteCA(t testing.TB, path string) string {
	t.Helper()
	Replace(t, path, ca.PEM)
	return path
}

// Replace writes data to path (0600) whole, as atomicfile.Replace does: a
// temporary file beside it, renamed.
func Replace(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := atomicfile.Replace(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Pool is a certificate pool of the given CAs.
func Pool(cas ...*CA) *x509.CertPool {
	p := x509.NewCertPool()
	for _, ca := range cas {
		p.AddCert(ca.Cert)
	}
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A user of basic_auth_users, as Prometheus scrapes with it: the name,
// the password and its bcrypt hash (htpasswd -nbBC 10 prometheus s3cret),
// what an operator pastes into a web configuration file.
const (
	BasicAuthUser     = "prometheus"
	BasicAuthPassword = "s3cret"
	BasicAuthHash     = "$2a$10$GPYVE0mNQwZAZrkVqt7D4OJ9gYHDCwjLd718M7FO/5o66GBOlGp.6"
)

// WebConfig writes a web configuration file (exporter-toolkit's format,
// node_exporter's --web.config.file) to dir/web.yml with the given body
// and returns its path.
func WebConfig(t testing.TB, dir, body string) string {
	t.Helper()
	path := filepath.Join(dir, "web.yml")
	Replace(t, path, []byte(body))
	return path
}
