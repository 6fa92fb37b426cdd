package agent

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/config"
)

// badEdit is an edit of the harness' files that the daemon refuses: at
// start, in check-config and on a reload, with one message.
type badEdit struct {
	name string
	// check is the check of Validate that refuses it ("files" for the
	// checks made when the files are read, LoadConfig's).
	check   string
	conf    string // host.conf keys set (replacing the same keys)
	devices string // the device YAML, when not fourAndTwo
	want    string // in the message
}

// badEdits has a case for every check Validate makes
// (TestEveryValidationHasABadEdit), the cases among them.
var badEdits = []badEdit{
	{name: "pipe root too long for the sockets", check: "plan",
		conf: "cuda_mps_pipe_directory: /tmp/" + strings.Repeat("p", 150) + "\n",
		want: "cuda_mps_pipe_directory: too long for the MPS sockets under it"},
	{name: "entry names no GPU present", check: "plan",
		devices: "devices:\n- path: 0000:77:00.0\n  type: NVIDIA_MPS\n  virtual_number: 2\n",
		want:    "devices.yml:2"},
	{name: "token file missing", check: "inventory token",
		conf: "mps_inventory_token_file: /nonexistent\n",
		want: "reading mps_inventory_token_file: open /nonexistent: no such file or directory"},
	{name: "CA file without a certificate", check: "ssl_ca_certs",
		conf: "mps_inventory_backend: region\nauth_url: http://127.0.0.1:1/v3\nadmin_user: a\nadmin_password: b\nssl_ca_certs: $DIR/not-a-ca.crt\n",
		want: "not-a-ca.crt holds no PEM certificate"},
	{name: "listen address of another machine", check: "listen address",
		conf: "mps_listen_address: 192.0.2.1:9331\n",
		want: "mps_listen_address: 192.0.2.1 is not an address of this machine: the daemon could not listen on it"},
	{name: "web config file that is no YAML mapping", check: "web config file",
		conf: "mps_web_config_file: $DIR/not-a-ca.crt\n",
		want: "not-a-ca.crt: yaml: unmarshal errors:"},
	{name: "inventory CA file without a certificate", check: "inventory TLS files",
		conf: "mps_inventory_ca_file: $DIR/not-a-ca.crt\n",
		want: "not-a-ca.crt: no PEM certificate in it"},
	{name: "host name longer than the inventory takes", check: "files",
		conf: "mps_host_name: " + strings.Repeat("h", 10000) + "\n",
		want: "mps_host_name: 10000 bytes, longer than the 128 the inventory allows for a host's name"},
}

// Every check Validate makes has a bad edit below that it refuses: a check
// added to Validate without a case here fails this test.
func TestEveryValidationHasABadEdit(t *testing.T) {
	covered := map[string]bool{}
	for _, e := range badEdits {
		covered[e.check] = true
	}
	for _, name := range Validations() {
		if !covered[name] {
			t.Errorf("Validate's check %q has no case in badEdits: add an edit it refuses", name)
		}
	}
}

// Each bad edit is refused by what the start runs (Validate, before
// anything is wired: cmd/mps-daemon), by check-config and by a reload of
// a running daemon, with the same message; the reload keeps the running
// configuration and says why in /status and the metric.
func TestBadEditsAreRefusedAtStartInCheckConfigAndOnReload(t *testing.T) {
	for _, e := range badEdits {
		t.Run(e.name, func(t *testing.T) {
			h := reloadHarness(t)
			ctx := context.Background()
			if err := os.WriteFile(filepath.Join(h.dir, "not-a-ca.crt"), []byte("not a certificate\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if e.devices != "" {
				writeAtomic(t, filepath.Join(h.dir, "devices.yml"), e.devices)
			}
			conf := strings.ReplaceAll(e.conf, "$DIR", h.dir)
			cfg, err := loadWithErr(t, h, conf)
			if e.check == "files" {
				if err == nil || !strings.Contains(err.Error(), e.want) {
					t.Fatalf("reading the files: %v, want %q", err, e.want)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(Validations(), e.check) {
					t.Fatalf("no check %q", e.check)
				}
				// Start: what cmd/mps-daemon runs before it wires anything.
				_, _, err = Validate(ctx, cfg, ModeCloudpods, h.backend, h.dir+"/nosys", h.dir+"/nodev")
				if err == nil || !strings.Contains(err.Error(), e.want) {
					t.Fatalf("start: %v, want %q", err, e.want)
				}
				var out strings.Builder
				if cerr := CheckConfig(ctx, &out, cfg, ModeCloudpods, h.backend, h.dir+"/nosys", h.dir+"/nodev"); cerr == nil || cerr.Error() != err.Error() {
					t.Errorf("check-config: %v\nstart:        %v", cerr, err)
				}
			}
			if h.agent.reload(ctx, "test") {
				t.Fatal("the reload took it")
			}
			st := h.agent.Status()
			if st.ConfigError != err.Error() {
				t.Errorf("/status config_error %q\nwant the start's %q", st.ConfigError, err)
			}
			if st.ConfigGeneration != 1 || h.agent.config().Host.ListenAddress != "127.0.0.1:0" || h.agent.config().Host.Backend() != "inventory" {
				t.Errorf("the configuration in force changed: generation %d", st.ConfigGeneration)
			}
			srv := httptest.NewServer(h.agent.Handler())
			defer srv.Close()
			if m := scrapeAgent(t, srv.URL); !strings.Contains(m, `mps_daemon_config_reloads_total{Hostname="node-1",result="rejected"} 1`) {
				t.Error("the refused reload is not counted")
			}
		})
	}
}

// loadWithErr is loadWith that returns LoadConfig's error.
func loadWithErr(t *testing.T, h *harness, extra string) (*Config, error) {
	t.Helper()
	path := h.hostConfPath()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		key, _, _ := strings.Cut(line, ":")
		if !strings.Contains(extra, key+":") {
			kept = append(kept, line)
		}
	}
	writeAtomic(t, path, strings.Join(kept, "\n")+"\n"+extra)
	return LoadConfig(filepath.Clean(path))
}

// A listen address is refused only when it cannot be this machine's.
func TestListenAddressMustBeThisMachines(t *testing.T) {
	for addr, ok := range map[string]bool{
		":9331": true, "0.0.0.0:9331": true, "[::]:9331": true, "127.0.0.1:9331": true, "127.0.0.2:9331": true,
		"[::1]:9331": true, "localhost:9331": true,
		"192.0.2.1:9331": false, "[2001:db8::1]:9331": false,
	} {
		hc, err := config.ParseHostConf("host.conf", []byte("mps_listen_address: \""+addr+"\"\n"))
		if err != nil {
			t.Fatal(err)
		}
		err = checkListenAddress(context.Background(), &validation{cfg: &Config{Host: hc}})
		if ok && err != nil || !ok && (err == nil || !strings.Contains(err.Error(), "host.conf:1: mps_listen_address: ") || !strings.Contains(err.Error(), "is not an address of this machine")) {
			t.Errorf("%s: %v", addr, err)
		}
	}
}

// The Kubernetes mode validates what its start reads: every bad edit the
// Cloudpods mode refuses, with the same message, but the inventory's
// token file and the region's CA file, which it never reads (issue 40:
// check-config refused a missing token file that the mode started on).
func TestTheKubernetesModeRefusesWhatItReads(t *testing.T) {
	cloudpodsOnly := map[string]bool{"inventory token": true, "ssl_ca_certs": true, "inventory TLS files": true}
	for _, e := range badEdits {
		if e.check == "files" {
			continue // LoadConfig's, the same in both modes
		}
		t.Run(e.name, func(t *testing.T) {
			h := reloadHarness(t)
			ctx := context.Background()
			if err := os.WriteFile(filepath.Join(h.dir, "not-a-ca.crt"), []byte("not a certificate\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if e.devices != "" {
				writeAtomic(t, filepath.Join(h.dir, "devices.yml"), e.devices)
			}
			cfg, err := loadWithErr(t, h, strings.ReplaceAll(e.conf, "$DIR", h.dir))
			if err != nil {
				t.Fatal(err)
			}
			_, _, cloudpods := Validate(ctx, cfg, ModeCloudpods, h.backend, h.dir+"/nosys", h.dir+"/nodev")
			_, _, kubernetes := Validate(ctx, cfg, ModeKubernetes, h.backend, h.dir+"/nosys", h.dir+"/nodev")
			var out strings.Builder
			checked := CheckConfig(ctx, &out, cfg, ModeKubernetes, h.backend, h.dir+"/nosys", h.dir+"/nodev")
			if cloudpods == nil || !strings.Contains(cloudpods.Error(), e.want) {
				t.Fatalf("the Cloudpods mode: %v, want %q", cloudpods, e.want)
			}
			switch {
			case cloudpodsOnly[e.check]:
				if kubernetes != nil || checked != nil {
					t.Errorf("the Kubernetes mode refuses what it never reads: start %v, check-config %v", kubernetes, checked)
				}
			case kubernetes == nil || kubernetes.Error() != cloudpods.Error():
				t.Errorf("the Kubernetes mode: %v\nthe Cloudpods mode: %v", kubernetes, cloudpods)
			case checked == nil || checked.Error() != cloudpods.Error():
				t.Errorf("check-config of the Kubernetes mode: %v\nthe Cloudpods mode: %v", checked, cloudpods)
			}
		})
	}
}
