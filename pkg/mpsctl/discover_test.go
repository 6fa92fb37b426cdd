package mpsctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/webtls"
)

// envMap is a fake environment for one test.
func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestResolveEndpoint(t *testing.T) {
	dir := t.TempDir()
	tokenFile := writeFile(t, dir, "token", "secret-from-file\n")
	withURL := writeFile(t, dir, "url.conf",
		"# shared with the Cloudpods host service\nlisten_interface: br0\nmps_inventory_url: http://10.0.0.5:9330\nmps_inventory_token: conf-token\n")
	withTokenFile := writeFile(t, dir, "tokenfile.conf", "mps_inventory_url: http://10.0.0.6:9330\nmps_inventory_token_file: "+tokenFile+"\n")
	noKeys := writeFile(t, dir, "nokeys.conf", "enable_cuda_mps: true\n")
	broken := writeFile(t, dir, "broken.conf", "mps_inventory_url: ftp://nowhere\ncuda_mps_replicas: 0\n")
	badTokenFile := writeFile(t, dir, "badtoken.conf", "mps_inventory_url: http://10.0.0.7:9330\nmps_inventory_token_file: "+filepath.Join(dir, "absent")+"\n")
	missing := filepath.Join(dir, "no-such.conf")
	// Stand-ins for config.DefaultInventoryTokenFile.
	adminToken := writeFile(t, dir, "admin.token", "local-admin-token\n")
	noAdminToken := filepath.Join(dir, "no-admin.token")

	withCA := writeFile(t, dir, "ca.conf", "mps_inventory_url: https://10.0.0.8:9330\nmps_inventory_token: conf-token\nmps_inventory_ca_file: /etc/yunion/pki/ca.crt\nmps_inventory_cert_file: /etc/yunion/pki/gpu-1.crt\nmps_inventory_key_file: /etc/yunion/pki/gpu-1.key\n")

	tests := []struct {
		name      string
		in        endpointInputs
		want      endpoint
		wantWarns []string // substrings, one per expected warning line
	}{
		{
			name: "flag beats env and host.conf",
			in: endpointInputs{FlagURL: "http://flag:1", FlagToken: "flag-token", HostConf: withURL,
				Env: envMap(map[string]string{EnvURL: "http://env:2", EnvToken: "env-token"})},
			want: endpoint{URL: "http://flag:1", Token: "flag-token"},
		},
		{
			name: "host.conf's CA file and client certificate",
			in:   endpointInputs{HostConf: withCA, Env: envMap(nil)},
			want: endpoint{URL: "https://10.0.0.8:9330", Token: "conf-token", TLS: webtls.Client{
				CAFile: "/etc/yunion/pki/ca.crt", CASetting: withCA + ": mps_inventory_ca_file",
				CertFile: "/etc/yunion/pki/gpu-1.crt", KeyFile: "/etc/yunion/pki/gpu-1.key", CertSetting: withCA + ": mps_inventory_cert_file"}},
		},
		{
			name: "an https:// URL and token from flags still take host.conf's CA file",
			in:   endpointInputs{FlagURL: "https://inventory.example", FlagToken: "t", HostConf: withCA, Env: envMap(nil)},
			want: endpoint{URL: "https://inventory.example", Token: "t", TLS: webtls.Client{
				CAFile: "/etc/yunion/pki/ca.crt", CASetting: withCA + ": mps_inventory_ca_file",
				CertFile: "/etc/yunion/pki/gpu-1.crt", KeyFile: "/etc/yunion/pki/gpu-1.key", CertSetting: withCA + ": mps_inventory_cert_file"}},
		},
		{
			name: "--ca-file beats the environment and host.conf",
			in: endpointInputs{FlagCAFile: "/flag-ca.pem", FlagCertFile: "/c.pem", FlagKeyFile: "/k.pem", HostConf: withCA,
				Env: envMap(map[string]string{EnvCAFile: "/env-ca.pem"})},
			want: endpoint{URL: "https://10.0.0.8:9330", Token: "conf-token", TLS: webtls.Client{
				CAFile: "/flag-ca.pem", CASetting: "--ca-file", CertFile: "/c.pem", KeyFile: "/k.pem", CertSetting: "--cert-file"}},
		},
		{
			name: "the environment's CA file beats host.conf's",
			in:   endpointInputs{HostConf: withCA, Env: envMap(map[string]string{EnvCAFile: "/env-ca.pem"})},
			want: endpoint{URL: "https://10.0.0.8:9330", Token: "conf-token", TLS: webtls.Client{
				CAFile: "/env-ca.pem", CASetting: EnvCAFile,
				CertFile: "/etc/yunion/pki/gpu-1.crt", KeyFile: "/etc/yunion/pki/gpu-1.key", CertSetting: withCA + ": mps_inventory_cert_file"}},
		},
		{
			name: "env beats host.conf",
			in: endpointInputs{HostConf: withURL,
				Env: envMap(map[string]string{EnvURL: "http://env:2", EnvToken: "env-token"})},
			want: endpoint{URL: "http://env:2", Token: "env-token"},
		},
		{
			name: "host.conf beats default",
			in:   endpointInputs{HostConf: withURL, Env: envMap(nil)},
			want: endpoint{URL: "http://10.0.0.5:9330", Token: "conf-token"},
		},
		{
			name: "URL and token are resolved each on its own",
			in:   endpointInputs{FlagURL: "http://flag:1", HostConf: withURL, Env: envMap(nil)},
			want: endpoint{URL: "http://flag:1", Token: "conf-token"},
		},
		{
			name: "token file",
			in:   endpointInputs{HostConf: withTokenFile, Env: envMap(nil)},
			want: endpoint{URL: "http://10.0.0.6:9330", Token: "secret-from-file"},
		},
		{
			name: "host.conf without our keys gives the default URL",
			in:   endpointInputs{HostConf: noKeys, Env: envMap(nil)},
			want: endpoint{URL: DefaultURL},
		},
		{
			name: "missing host.conf is silent",
			in:   endpointInputs{HostConf: missing, Env: envMap(nil)},
			want: endpoint{URL: DefaultURL},
		},
		{
			name:      "broken host.conf warns once and is ignored",
			in:        endpointInputs{HostConf: broken, Env: envMap(nil)},
			want:      endpoint{URL: DefaultURL},
			wantWarns: []string{"Warning: ignoring " + broken},
		},
		{
			name: "broken host.conf is not read when flags say everything",
			in:   endpointInputs{FlagURL: "http://flag:1", FlagToken: "t", HostConf: broken, Env: envMap(nil)},
			want: endpoint{URL: "http://flag:1", Token: "t"},
		},
		{
			name:      "unreadable token file warns, keeps the URL",
			in:        endpointInputs{HostConf: badTokenFile, Env: envMap(nil)},
			want:      endpoint{URL: "http://10.0.0.7:9330"},
			wantWarns: []string{"no inventory token"},
		},
		{
			name: "no host.conf: the local inventory's admin token",
			in:   endpointInputs{HostConf: missing, Env: envMap(nil), DefaultTokenFile: adminToken},
			want: endpoint{URL: DefaultURL, Token: "local-admin-token"},
		},
		{
			name: "host.conf without our keys: the local inventory's admin token",
			in:   endpointInputs{HostConf: noKeys, Env: envMap(nil), DefaultTokenFile: adminToken},
			want: endpoint{URL: DefaultURL, Token: "local-admin-token"},
		},
		{
			name:      "broken host.conf: warned about, the admin token still found",
			in:        endpointInputs{HostConf: broken, Env: envMap(nil), DefaultTokenFile: adminToken},
			want:      endpoint{URL: DefaultURL, Token: "local-admin-token"},
			wantWarns: []string{"Warning: ignoring " + broken},
		},
		{
			name: "token file named in host.conf beats the admin token",
			in:   endpointInputs{HostConf: withTokenFile, Env: envMap(nil), DefaultTokenFile: adminToken},
			want: endpoint{URL: "http://10.0.0.6:9330", Token: "secret-from-file"},
		},
		{
			name: "inline token in host.conf beats the admin token",
			in:   endpointInputs{HostConf: withURL, Env: envMap(nil), DefaultTokenFile: adminToken},
			want: endpoint{URL: "http://10.0.0.5:9330", Token: "conf-token"},
		},
		{
			name: "environment beats the admin token",
			in:   endpointInputs{HostConf: missing, Env: envMap(map[string]string{EnvToken: "env-token"}), DefaultTokenFile: adminToken},
			want: endpoint{URL: DefaultURL, Token: "env-token"},
		},
		{
			name:      "admin token file not readable: one warning",
			in:        endpointInputs{HostConf: missing, Env: envMap(nil), DefaultTokenFile: dir},
			want:      endpoint{URL: DefaultURL},
			wantWarns: []string{"Warning: no inventory token: reading mps_inventory_token_file: "},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.in.DefaultTokenFile == "" {
				tt.in.DefaultTokenFile = noAdminToken // no local inventory
			}
			got, warns := resolveEndpoint(tt.in, config.LoadHostConf)
			if got != tt.want {
				t.Errorf("endpoint = %+v, want %+v", got, tt.want)
			}
			if len(warns) != len(tt.wantWarns) {
				t.Fatalf("warnings = %q, want %d", warns, len(tt.wantWarns))
			}
			for i, w := range warns {
				if !strings.Contains(w, tt.wantWarns[i]) || strings.Contains(w, "\n") {
					t.Errorf("warning %d = %q, want one line containing %q", i, w, tt.wantWarns[i])
				}
			}
		})
	}
}

func TestResolveEndpointUnreadableHostConf(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads files whatever their mode")
	}
	p := writeFile(t, t.TempDir(), "host.conf", "mps_inventory_url: http://10.0.0.5:9330\n")
	if err := os.Chmod(p, 0); err != nil {
		t.Fatal(err)
	}
	got, warns := resolveEndpoint(endpointInputs{HostConf: p, Env: envMap(nil)}, config.LoadHostConf)
	if got.URL != DefaultURL || len(warns) != 0 {
		t.Errorf("got %+v, warnings %q; want the default and no warning", got, warns)
	}
}
