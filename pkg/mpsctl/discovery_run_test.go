package mpsctl

import (
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// deadURL is a loopback URL where nothing listens: a port that was just free.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + l.Addr().String()
	l.Close()
	return u
}

// TestFindInventory runs mpsctl with no --url and checks which inventory it
// reached: the seeded one lists 8 devices, a dead URL gives the cannot-reach
// line naming it.
func TestFindInventory(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		t.Parallel()
		inv := newInventory(t, open())
		dead := deadURL(t)
		dir := t.TempDir()
		tokenFile := writeFile(t, dir, "inventory.token", inv.Token+"\n")
		goodConf := writeFile(t, dir, "good.conf",
			"# Cloudpods host service keys, unknown to mpsctl\nlisten_interface: br0\nport: 8885\n"+
				"mps_inventory_url: "+inv.URL+"\nmps_inventory_token_file: "+tokenFile+"\n")
		deadConf := writeFile(t, dir, "dead.conf", "mps_inventory_url: "+dead+"\nmps_inventory_token: wrong\n")
		deadURLGoodToken := writeFile(t, dir, "token-only.conf", "mps_inventory_url: "+dead+"\nmps_inventory_token_file: "+tokenFile+"\n")

		tests := []struct {
			name string
			env  map[string]string
			args []string
			// reached is true when mpsctl must have listed the seeded inventory,
			// false when it must have tried the dead one.
			reached bool
		}{
			{
				name:    "host.conf names the inventory and its token file",
				env:     map[string]string{EnvHostConf: goodConf},
				reached: true,
			},
			{
				name:    "--host-conf flag",
				args:    []string{"--host-conf", goodConf},
				reached: true,
			},
			{
				name:    "environment beats host.conf",
				env:     map[string]string{EnvHostConf: deadConf, EnvURL: inv.URL, EnvToken: inv.Token},
				reached: true,
			},
			{
				name:    "flags beat the environment",
				env:     map[string]string{EnvHostConf: deadConf, EnvURL: dead, EnvToken: "wrong"},
				args:    []string{"--url", inv.URL, "--token", inv.Token},
				reached: true,
			},
			{
				name:    "environment URL, host.conf token",
				env:     map[string]string{EnvHostConf: deadURLGoodToken, EnvURL: inv.URL},
				reached: true,
			},
			{
				name: "host.conf beats the default",
				env:  map[string]string{EnvHostConf: deadConf},
			},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := runMpsctl(t, tt.env, append(tt.args, "isolated-device-list")...)
				if tt.reached {
					if r.Code != ExitOK || r.Stderr != "" {
						t.Fatalf("exit %d, stderr %q", r.Code, r.Stderr)
					}
					if got := footer(r.Stdout); !strings.HasPrefix(got, "*** Total: 8 ") {
						t.Errorf("footer = %q, want the seeded inventory's 8 devices", got)
					}
					return
				}
				want := "Error: cannot reach the inventory at " + dead + ": "
				if r.Code != ExitRuntime || !strings.HasPrefix(r.Stderr, want) {
					t.Errorf("exit %d, stderr %q; want exit 1 and %q", r.Code, r.Stderr, want)
				}
			})
		}
	})
}

// TestDefaultInventory: with no flag, no variable and a broken host.conf,
// mpsctl warns once and falls back to the local default URL.
func TestDefaultInventory(t *testing.T) {
	t.Parallel()
	broken := writeFile(t, t.TempDir(), "host.conf", "mps_inventory_url: [not, a, url]\ncuda_mps_replicas: zero\n")
	for _, tt := range []struct {
		name     string
		hostConf string
		warning  bool
	}{
		{"no host.conf", filepath.Join(t.TempDir(), "absent.conf"), false},
		{"broken host.conf", broken, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := runMpsctl(t, map[string]string{EnvHostConf: tt.hostConf}, "--timeout", "2s", "host-list")
			if r.Code == ExitOK {
				t.Skip("an inventory answers on " + DefaultURL + " on this machine")
			}
			lines := strings.Split(strings.TrimSuffix(r.Stderr, "\n"), "\n")
			wantLines := 1
			if tt.warning {
				wantLines = 2
				if !strings.HasPrefix(lines[0], "Warning: ignoring "+broken+": ") {
					t.Errorf("first line = %q, want the host.conf warning", lines[0])
				}
			}
			if len(lines) != wantLines {
				t.Fatalf("stderr has %d lines, want %d:\n%s", len(lines), wantLines, r.Stderr)
			}
			if !strings.HasPrefix(lines[len(lines)-1], "Error: cannot reach the inventory at "+DefaultURL+": ") {
				t.Errorf("last line = %q, want the cannot-reach line for %s", lines[len(lines)-1], DefaultURL)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	silent := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	t.Cleanup(silent.Close)
	r := runMpsctl(t, nil, "--url", silent.URL, "--timeout", "50ms", "isolated-device-list")
	want := "Error: cannot reach the inventory at " + silent.URL + ": no answer within 50ms (set --url or MPS_INVENTORY_URL)\n"
	if r.Code != ExitRuntime || r.Stderr != want {
		t.Errorf("exit %d, stderr %q; want exit 1, %q", r.Code, r.Stderr, want)
	}
}
