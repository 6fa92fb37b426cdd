package webtls

import (
	"fmt"
	"log/slog"
	"net"
)

// Listener is one of this project's HTTP listeners as its settings give
// it: mps-inventory's API (--listen, --web.config.file) and the daemon's
// /metrics and /status (host.conf's mps_listen_address and
// mps_web_config_file). Both open it the same way: the web configuration
// file is checked (Check) before anything listens, then the address is
// bound (Listen), and a listener that serves plain HTTP beyond loopback
// says once what it shows the network; Serve serves it.
type Listener struct {
	// Address is the host:port to listen on.
	Address string
	// WebConfigFile is the web configuration file; "" serves plain HTTP
	// with no authentication.
	WebConfigFile string
	// AddressSetting and WebConfigSetting name where the two come from in
	// messages (mps_listen_address, --web.config.file); an empty
	// AddressSetting names only the address.
	AddressSetting, WebConfigSetting string
	// InClear is the warning logged when the listener serves plain HTTP
	// beyond loopback: what anyone on the network reads there, and how
	// to give it TLS.
	InClear string
}

// Check reads and checks the web configuration file as the listener will
// serve it (LoadWebConfig); its error begins with WebConfigSetting. A
// start, check-config and a reload run it alike.
func (l Listener) Check() (WebConfig, error) {
	wc, err := LoadWebConfig(l.WebConfigFile)
	if err != nil {
		return wc, fmt.Errorf("%s: %w", l.WebConfigSetting, err)
	}
	return wc, nil
}

// Listen binds Address for wc, the web configuration Check returned. A
// listener beyond loopback without TLS (wc.InClear) is one warning, the
// InClear text with the address.
func (l Listener) Listen(wc WebConfig, log *slog.Logger) (net.Listener, error) {
	ln, err := net.Listen("tcp", l.Address)
	if err != nil {
		where := l.Address
		if l.AddressSetting != "" {
			where = l.AddressSetting + " " + l.Address
		}
		return nil, fmt.Errorf("listening on %s: %w", where, err)
	}
	if wc.InClear(ln.Addr()) {
		log.Warn(l.InClear, "address", ln.Addr().String())
	}
	return ln, nil
}
