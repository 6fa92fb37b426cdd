package metrics

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"yunion.io/x/mps-daemon/internal/testsupport/pki"
	"yunion.io/x/mps-daemon/pkg/config"
)

const scrapePath = "../../packaging/prometheus/scrape.yml"

type scrapeJob struct {
	JobName       string `yaml:"job_name"`
	MetricsPath   string `yaml:"metrics_path"`
	Scheme        string `yaml:"scheme"`
	Authorization *struct {
		Type            string `yaml:"type"`
		CredentialsFile string `yaml:"credentials_file"`
	} `yaml:"authorization"`
	TLSConfig *struct {
		CAFile string `yaml:"ca_file"`
	} `yaml:"tls_config"`
	BasicAuth *struct {
		Username     string `yaml:"username"`
		PasswordFile string `yaml:"password_file"`
	} `yaml:"basic_auth"`
	StaticConfigs []struct {
		Targets []string `yaml:"targets"`
	} `yaml:"static_configs"`
}

// The example scrape config reaches the daemon and the inventory on their
// default ports, at /metrics, over HTTPS verified against a CA file (issue
// 47: the daemon with basic auth, the inventory with a token); with
// promtool, Prometheus itself accepts it.
func TestScrapeConfig(t *testing.T) {
	b, err := os.ReadFile(scrapePath)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ScrapeConfigs []scrapeJob `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	jobs := map[string]scrapeJob{}
	for _, j := range cfg.ScrapeConfigs {
		jobs[j.JobName] = j
	}
	defaults := config.DefaultHostConf()
	_, daemonPort, _ := net.SplitHostPort(defaults.ListenAddress)
	inv, err := url.Parse(defaults.InventoryURL)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		job, port        string
		token, basicAuth bool
	}{
		{"mps-daemon", daemonPort, false, true},
		{"mps-inventory", inv.Port(), true, false},
	}
	for _, tt := range tests {
		t.Run(tt.job, func(t *testing.T) {
			j, ok := jobs[tt.job]
			if !ok {
				t.Fatalf("no job %s", tt.job)
			}
			if j.MetricsPath != "/metrics" {
				t.Errorf("metrics_path %q", j.MetricsPath)
			}
			if len(j.StaticConfigs) == 0 || len(j.StaticConfigs[0].Targets) == 0 {
				t.Fatal("no targets")
			}
			for _, target := range j.StaticConfigs[0].Targets {
				if _, port, err := net.SplitHostPort(target); err != nil || port != tt.port {
					t.Errorf("target %s: want the default port %s", target, tt.port)
				}
			}
			hasToken := j.Authorization != nil && j.Authorization.Type == "Bearer" && j.Authorization.CredentialsFile != ""
			if hasToken != tt.token {
				t.Errorf("bearer token %v, want %v", hasToken, tt.token)
			}
			if j.Scheme != "https" || j.TLSConfig == nil || j.TLSConfig.CAFile == "" {
				t.Errorf("scheme %q, tls_config %+v: want https verified against a CA file", j.Scheme, j.TLSConfig)
			}
			hasBasic := j.BasicAuth != nil && j.BasicAuth.Username != "" && j.BasicAuth.PasswordFile != ""
			if hasBasic != tt.basicAuth {
				t.Errorf("basic auth %v, want %v", hasBasic, tt.basicAuth)
			}
		})
	}

	// promtool wants the token file to exist: point it at one.
	promtool(t)
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("mpsi_0_0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	local := strings.ReplaceAll(string(b), jobs["mps-inventory"].Authorization.CredentialsFile, token)
	// And the CA (a real one) and password files.
	for f, content := range map[string][]byte{
		jobs["mps-daemon"].TLSConfig.CAFile:       pki.NewCA(t, "site CA").PEM,
		jobs["mps-daemon"].BasicAuth.PasswordFile: []byte("s3cret\n"),
	} {
		here := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(here, content, 0o600); err != nil {
			t.Fatal(err)
		}
		local = strings.ReplaceAll(local, f, here)
	}
	path := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(path, []byte(local), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runPromtool(t, nil, "check", "config", path); err != nil {
		t.Errorf("promtool check config: %v\n%s", err, out)
	}
}
