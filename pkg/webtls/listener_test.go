package webtls_test

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/webtls"
)

// A listener warns, once, when it serves plain HTTP beyond loopback, with
// its own words and the address; plain on loopback, or TLS on every
// address, it says nothing.
func TestListenerWarnsOnlyInClearBeyondLoopback(t *testing.T) {
	s := newSite(t)
	tlsWC := s.webConfig(t, "")
	const warning = "plain HTTP beyond loopback: the test's secrets cross the network"
	for _, tt := range []struct {
		name, addr string
		wc         webtls.WebConfig
		warns      bool
	}{
		{"plain on loopback", "127.0.0.1:0", webtls.WebConfig{}, false},
		{"TLS on every address", "0.0.0.0:0", tlsWC, false},
		{"plain on every address", "0.0.0.0:0", webtls.WebConfig{}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			l := webtls.Listener{Address: tt.addr, InClear: warning}
			ln, err := l.Listen(tt.wc, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			n := strings.Count(logs.String(), warning)
			if !tt.warns && n != 0 || tt.warns && (n != 1 || !strings.Contains(logs.String(), "address="+ln.Addr().String())) {
				t.Errorf("%d warnings (want them: %v):\n%s", n, tt.warns, logs.String())
			}
		})
	}
}

// What goes wrong is said under the setting the operator wrote: the web
// configuration file's before anything listens, the address's when it
// cannot be bound.
func TestListenerNamesItsSettings(t *testing.T) {
	absent := filepath.Join(t.TempDir(), "web.yml")
	l := webtls.Listener{Address: "127.0.0.1:0", WebConfigFile: absent, AddressSetting: "mps_listen_address", WebConfigSetting: "mps_web_config_file"}
	if _, err := l.Check(); err == nil || !strings.HasPrefix(err.Error(), "mps_web_config_file: web config file: open "+absent) {
		t.Errorf("Check of an absent file: %v", err)
	}
	l.WebConfigFile = ""
	wc, err := l.Check()
	if err != nil || wc.TLS || wc.Path != "" {
		t.Fatalf("no file: %+v, %v; want plain HTTP", wc, err)
	}
	taken, err := l.Listen(wc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	l.Address = taken.Addr().String()
	if _, err := l.Listen(wc, slog.New(slog.DiscardHandler)); err == nil || !strings.HasPrefix(err.Error(), "listening on mps_listen_address "+l.Address+": ") {
		t.Errorf("an address in use: %v", err)
	}
	l.AddressSetting = ""
	if _, err := l.Listen(wc, slog.New(slog.DiscardHandler)); err == nil || !strings.HasPrefix(err.Error(), "listening on "+l.Address+": ") {
		t.Errorf("an address in use, no setting named: %v", err)
	}
}
