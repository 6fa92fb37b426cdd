package webtls

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// RefusedError is a connection refused for TLS: the server's certificate
// did not verify, the server did not take this client's, or one side
// does not speak TLS. Another try fails the same until someone changes a
// certificate or a setting, so callers do not retry it at once (a daemon
// retries it with its backoff, as any outage).
type RefusedError struct {
	// Cause is why, in an operator's words.
	Cause string
	// ClientCertificate: the server refused the handshake for this
	// client's certificate, or for want of one.
	ClientCertificate bool
	// ServerCertificate: the server's certificate did not verify against
	// what the client trusts (its CA, validity or names): what to trust
	// is the client's setting to look at.
	ServerCertificate bool
	Err               error
}

func (e *RefusedError) Error() string {
	if e.Err == nil {
		return "TLS refused: " + e.Cause
	}
	return "TLS refused: " + e.Cause + " (" + e.Err.Error() + ")"
}

func (e *RefusedError) Unwrap() error { return e.Err }

// Refusal is err told as a *RefusedError when it is a refused TLS
// connection, nil otherwise. trust says what the client trusts ("the
// system's roots", a CA file); empty says "the CAs this client trusts".
func Refusal(err error, trust string) *RefusedError {
	if err == nil {
		return nil
	}
	if re, ok := errors.AsType[*RefusedError](err); ok {
		return re
	}
	if trust == "" {
		trust = "the CAs this client trusts"
	}
	refused := func(format string, args ...any) *RefusedError {
		return &RefusedError{Cause: fmt.Sprintf(format, args...), Err: err}
	}
	serverCert := func(format string, args ...any) *RefusedError {
		r := refused(format, args...)
		r.ServerCertificate = true
		return r
	}
	if ua, ok := errors.AsType[x509.UnknownAuthorityError](err); ok && ua.Cert != nil {
		return serverCert("the server's certificate (%s) is signed by %q, not by a CA of %s", subject(ua.Cert), ua.Cert.Issuer.String(), trust)
	}
	if he, ok := errors.AsType[x509.HostnameError](err); ok && he.Certificate != nil {
		return serverCert("the server's certificate is for %s, not for %q, the host the client was told to reach", names(he.Certificate), he.Host)
	}
	if ci, ok := errors.AsType[x509.CertificateInvalidError](err); ok && ci.Cert != nil {
		now := time.Now()
		switch {
		case ci.Reason == x509.Expired && now.After(ci.Cert.NotAfter):
			return serverCert("the server's certificate (%s) expired at %s", subject(ci.Cert), ci.Cert.NotAfter.UTC().Format(time.RFC3339))
		case ci.Reason == x509.Expired:
			return serverCert("the server's certificate (%s) is not valid before %s (is this host's clock right?)", subject(ci.Cert), ci.Cert.NotBefore.UTC().Format(time.RFC3339))
		}
		return serverCert("the server's certificate (%s) is not valid: %s", subject(ci.Cert), ci.Error())
	}
	if cv, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return serverCert("the server's certificate did not verify against %s: %v", trust, cv.Err)
	}
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok {
		return refused("the server does not speak TLS at this address (an https:// URL to a plain HTTP port?)")
	}
	if oe, ok := errors.AsType[*net.OpError](err); ok && oe.Op == "remote error" && oe.Err != nil {
		// An alert the server sent: crypto/tls's text of it.
		switch alert := strings.TrimPrefix(oe.Err.Error(), "tls: "); alert {
		case "certificate required":
			r := refused("the server requires a client certificate and none was presented")
			r.ClientCertificate = true
			return r
		case "bad certificate", "unknown certificate authority", "certificate expired", "unsupported certificate", "certificate revoked", "certificate unknown":
			r := refused("the server did not accept this client's certificate, or the lack of one (%s)", alert)
			r.ClientCertificate = true
			return r
		default:
			return refused("the server refused the TLS handshake (%s)", alert)
		}
	}
	return nil
}

// plainToTLS is what Go's HTTP server answers a plain HTTP request sent
// to its TLS port (net/http, server.go), status 400.
var plainToTLS = []byte("Client sent an HTTP request to an HTTPS server.")

// PlainToTLS is the refusal of a plain http:// request answered by a
// server that speaks only HTTPS there, nil for any other answer.
func PlainToTLS(status int, body []byte) *RefusedError {
	if status != 400 || !bytes.HasPrefix(bytes.TrimSpace(body), plainToTLS) {
		return nil
	}
	return &RefusedError{Cause: "the server speaks only HTTPS at this address: the URL says http://, make it https://"}
}

// subject names a certificate by its subject and serial.
func subject(c *x509.Certificate) string {
	return fmt.Sprintf("subject %q, serial %s", c.Subject.String(), c.SerialNumber.Text(16))
}

// names lists the names and addresses a certificate is for.
func names(c *x509.Certificate) string {
	var out []string
	out = append(out, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	if len(out) == 0 {
		return fmt.Sprintf("no name (subject %q, and no subject alternative name)", c.Subject.String())
	}
	return strings.Join(out, ", ")
}
