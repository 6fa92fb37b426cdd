package mpsctl

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/pki"
	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/inventory/server"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
	"yunion.io/x/mps-daemon/pkg/webtls"
)

// serveTLS serves the API over st through the web configuration body
// (certificate and key filled in) on loopback until t ends; it returns
// the https:// URL, an admin token and the directory of the site's files
// (ca.crt, the site CA).
func serveTLS(t *testing.T, st *store.Store, ca *pki.CA, extra string) (url, token, dir string) {
	t.Helper()
	dir = t.TempDir()
	f := ca.Issue(t, pki.Leaf{}).WriteFiles(t, dir, "inventory")
	ca.WriteCA(t, filepath.Join(dir, "ca.crt"))
	wc, err := webtls.LoadWebConfig(pki.WebConfig(t, dir, fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n%s", f.Cert, f.Key, extra)))
	if err != nil {
		t.Fatal(err)
	}
	token, _, err = st.CreateToken(t.Context(), store.NewToken{Name: "mpsctl tls", Role: store.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	return "https://" + pki.Serve(t, wc, server.New(st, server.Options{}, nil)), token, dir
}

// mpsctl verifies an HTTPS inventory against the CA file it is given
// (flag, environment or host.conf), says why when the certificate is not
// one it trusts, and presents the host's client certificate where the
// inventory requires one.
func TestMpsctlOverHTTPS(t *testing.T) {
	st := storetest.Open(t, storetest.Backends()[0].DSN(t))
	ca := pki.NewCA(t, "site CA")
	hostsCA := pki.NewCA(t, "hosts CA")
	hostsFile := hostsCA.WriteCA(t, filepath.Join(t.TempDir(), "hosts-ca.crt"))
	url, token, dir := serveTLS(t, st, ca, "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: "+hostsFile+"\n")
	caFile := filepath.Join(dir, "ca.crt")
	other := pki.NewCA(t, "another CA").WriteCA(t, filepath.Join(t.TempDir(), "other.crt"))

	list := func(env map[string]string, args ...string) result {
		return runMpsctl(t, env, append(append([]string{"--url", url, "--token", token}, args...), "host-list")...)
	}
	if r := list(nil, "--ca-file", caFile); r.Code != ExitOK || !strings.Contains(r.Stdout, "Total: 0") {
		t.Errorf("--ca-file: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if r := list(map[string]string{EnvCAFile: caFile}); r.Code != ExitOK {
		t.Errorf("%s: exit %d %s", EnvCAFile, r.Code, r.Stderr)
	}
	hostConf := filepath.Join(t.TempDir(), "host.conf")
	pki.Replace(t, hostConf, []byte("mps_inventory_url: "+url+"\nmps_inventory_token: "+token+"\nmps_inventory_ca_file: "+caFile+"\n"))
	if r := runMpsctl(t, map[string]string{EnvHostConf: hostConf}, "host-list"); r.Code != ExitOK {
		t.Errorf("host.conf's mps_inventory_ca_file: exit %d %s", r.Code, r.Stderr)
	}

	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"another CA", []string{"--ca-file", other}, `is signed by "CN=site CA,O=mps-daemon tests", not by a CA of ` + other + " (--ca-file)"},
		{"the system's roots", nil, "not by a CA of the CAs this client trusts"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := list(nil, tt.args...)
			if r.Code != ExitRuntime || !strings.HasPrefix(r.Stderr, "Error: the inventory at "+url+": TLS refused: ") ||
				!strings.Contains(r.Stderr, tt.want) || strings.Count(r.Stderr, "\n") != 1 {
				t.Errorf("exit %d, stderr %q; want one line with %q", r.Code, r.Stderr, tt.want)
			}
			if !strings.Contains(r.Stderr, "says whom to trust") {
				t.Errorf("no word of the settings that say whom to trust: %q", r.Stderr)
			}
		})
	}
	if r := list(nil, "--ca-file", filepath.Join(dir, "nope.crt")); r.Code != ExitUsage || !strings.Contains(r.Stderr, "--ca-file: open "+filepath.Join(dir, "nope.crt")) {
		t.Errorf("an absent CA file: exit %d %q", r.Code, r.Stderr)
	}

	// A client certificate of the hosts' CA is taken; one of another CA
	// refused, with the cause.
	certDir := t.TempDir()
	good := hostsCA.Issue(t, pki.Leaf{CommonName: "gpu-1", Client: true}).WriteFiles(t, certDir, "gpu-1")
	if r := list(nil, "--ca-file", caFile, "--cert-file", good.Cert, "--key-file", good.Key); r.Code != ExitOK {
		t.Errorf("with a client certificate: exit %d %s", r.Code, r.Stderr)
	}
	bad := ca.Issue(t, pki.Leaf{CommonName: "gpu-1", Client: true}).WriteFiles(t, certDir, "stranger")
	if r := list(nil, "--ca-file", caFile, "--cert-file", bad.Cert, "--key-file", bad.Key); r.Code != ExitRuntime || !strings.Contains(r.Stderr, "did not accept this client's certificate") ||
		strings.Contains(r.Stderr, "says whom to trust") {
		t.Errorf("a client certificate of another CA: exit %d %q", r.Code, r.Stderr)
	}
}
