// Package webtls is how this project's HTTP listeners and clients use TLS.
//
// A listener (mps-inventory's API, the daemon's /metrics and /status)
// takes the Prometheus ecosystem's web configuration file, the one
// node_exporter takes as --web.config.file (github.com/prometheus/
// exporter-toolkit): tls_server_config (certificate and key, minimum
// version, client_auth_type and client_ca_file for client certificates)
// and basic_auth_users. The toolkit reads the file again at every TLS
// handshake and every request, so a certificate, a key, a client CA or a
// password replaced on disk applies to the next connection with no
// restart; only turning TLS on or off needs one (Serve decides at start).
//
// A client (the daemon and mpsctl towards mps-inventory) trusts the CAs of
// one file, or the system's roots, and may present a client certificate;
// it reads those files again at each new connection too (Client). A
// connection refused for TLS is told in an operator's words (Refusal):
// which certificate, signed by whom, valid when, for which name.
package webtls

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v2"

	"yunion.io/x/mps-daemon/pkg/atomicfile"
)

// maxFileBytes bounds the web configuration file and the PEM files it and
// a client name: a few certificates are a few kB.
const maxFileBytes = 1 << 20

// WebConfig is a web configuration file, read and checked. The zero value
// (no file) serves plain HTTP with no authentication.
type WebConfig struct {
	// Path is the file; empty for none.
	Path string
	// TLS: tls_server_config configures TLS, so the listener answers only
	// HTTPS.
	TLS bool
	// CertFile is tls_server_config's cert_file, resolved against the
	// file's directory ("" when the certificate is inline).
	CertFile string
	// ClientAuth is client_auth_type as written ("" for none).
	ClientAuth string
	// Users is how many basic_auth_users there are.
	Users int
	// certPEM is tls_server_config's inline cert, when it has one.
	certPEM string
}

// LoadWebConfig reads and checks the web configuration file at path as the
// toolkit will serve it: its keys (strictly: a misspelt key is an error),
// the certificate and key (which must load as a pair), the client CAs, the
// bcrypt hashes of the users. "" is no file. Errors name the file.
func LoadWebConfig(path string) (WebConfig, error) {
	if path == "" {
		return WebConfig{}, nil
	}
	data, err := readRegular(path)
	if err != nil {
		return WebConfig{}, fmt.Errorf("web config file: %w", err)
	}
	var c web.Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		// yaml's errors are one line per field: folded into one.
		return WebConfig{}, fmt.Errorf("web config file %s: %s", path, strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " "))
	}
	c.TLSConfig.SetDirectory(filepath.Dir(path))
	// The files it names are read by the toolkit as they are, at every
	// handshake: a FIFO or a device there would hang each one.
	for key, f := range map[string]string{"cert_file": c.TLSConfig.TLSCertPath, "key_file": c.TLSConfig.TLSKeyPath, "client_ca_file": c.TLSConfig.ClientCAs} {
		if f == "" {
			continue
		}
		if _, err := readRegular(f); err != nil {
			return WebConfig{}, fmt.Errorf("web config file %s: tls_server_config.%s: %w", path, key, err)
		}
	}
	if err := web.Validate(path); err != nil {
		return WebConfig{}, fmt.Errorf("web config file %s: %w", path, err)
	}
	return WebConfig{
		Path: path, TLS: c.TLSConfig.IsEnabled(), CertFile: c.TLSConfig.TLSCertPath,
		ClientAuth: c.TLSConfig.ClientAuth, Users: len(c.Users), certPEM: c.TLSConfig.TLSCert,
	}, nil
}

// Scheme is https when the listener serves TLS, else http.
func (wc WebConfig) Scheme() string {
	if wc.TLS {
		return "https"
	}
	return "http"
}

// ClientCertificates says whether the listener asks clients for a
// certificate it verifies against client_ca_file.
func (wc WebConfig) ClientCertificates() bool {
	switch wc.ClientAuth {
	case "VerifyClientCertIfGiven", "RequireAndVerifyClientCert":
		return true
	}
	return false
}

// RequiresClientCertificate says whether the listener refuses a client
// that presents no certificate.
func (wc WebConfig) RequiresClientCertificate() bool {
	switch wc.ClientAuth {
	case "RequireAnyClientCert", "RequireClientCert", "RequireAndVerifyClientCert":
		return true
	}
	return false
}

// Attrs are the web configuration for the line that says the listener
// serves: whether TLS, client certificates and basic auth are on.
func (wc WebConfig) Attrs() []any {
	attrs := []any{"tls", wc.TLS}
	if wc.Path != "" {
		attrs = append(attrs, "web_config_file", wc.Path)
	}
	if wc.ClientAuth != "" {
		attrs = append(attrs, "client_auth_type", wc.ClientAuth)
	}
	if wc.Users > 0 {
		attrs = append(attrs, "basic_auth_users", wc.Users)
	}
	return attrs
}

// InClear says whether a listener on addr serves plain HTTP to other
// machines: no TLS, and an address other than loopback (a wildcard
// address is every interface).
func (wc WebConfig) InClear(addr net.Addr) bool {
	if wc.TLS {
		return false
	}
	tcp, ok := addr.(*net.TCPAddr)
	return !ok || !tcp.IP.IsLoopback()
}

// Serve serves srv on ln as wc says (the toolkit's web.Serve) until srv is
// shut down, and returns what srv's Serve returns: http.ErrServerClosed
// after a shutdown. The toolkit's own info lines are dropped (the caller
// writes one line saying what it serves, with wc.Attrs); its warnings and
// errors (a web configuration file that became unreadable) are logged.
// srv.ErrorLog, when unset, goes to log at warning level: a refused
// handshake is one line naming the peer and the cause.
func Serve(ln net.Listener, srv *http.Server, wc WebConfig, log *slog.Logger) error {
	if srv.ErrorLog == nil {
		srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	}
	path := wc.Path
	return web.Serve(ln, srv, &web.FlagConfig{WebConfigFile: &path}, slog.New(warnings{log.Handler()}))
}

// warnings passes on the records of warning level and above.
type warnings struct{ slog.Handler }

func (w warnings) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.Handler.Enabled(ctx, l)
}

func (w warnings) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return nil
	}
	return w.Handler.Handle(ctx, r)
}

func (w warnings) WithAttrs(attrs []slog.Attr) slog.Handler {
	return warnings{w.Handler.WithAttrs(attrs)}
}

func (w warnings) WithGroup(name string) slog.Handler { return warnings{w.Handler.WithGroup(name)} }

// readRegular reads a regular file of at most maxFileBytes through the
// project's bounded reader (atomicfile.Read: opened without blocking, so a
// FIFO, a device or a directory put there, even after a check, is refused
// and nothing hangs on it), in this package's words.
func readRegular(path string) ([]byte, error) {
	data, err := atomicfile.Read(path, maxFileBytes, true)
	var re *atomicfile.ReadError
	switch {
	case !errors.As(err, &re):
		return data, err
	case re.Mode.Type() != 0:
		return nil, fmt.Errorf("%s: not a regular file but %s", path, kind(re.Mode))
	}
	return nil, fmt.Errorf("%s: more than the %d bytes a configuration or certificate file may have", path, maxFileBytes)
}

// kind names a file mode that is not a regular file's.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "a special file"
}
