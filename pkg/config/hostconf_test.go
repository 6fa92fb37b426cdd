package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// sameConf compares what a caller sees, leaving out the line bookkeeping.
func sameConf(t *testing.T, got, want *HostConf) {
	t.Helper()
	g, w := *got, *want
	g.lines, w.lines = nil, nil
	if !reflect.DeepEqual(g, w) {
		t.Errorf("got  %+v\nwant %+v", g, w)
	}
}

func TestParseHostConfDefaults(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"empty", ""},
		{"comments only", "# managed by ansible\n\n# nothing here yet\n"},
		{"empty document", "---\n"},
		{"only Cloudpods keys", "port: 8885\nzone: zone0\n"},
		{"empty values keep defaults", "cuda_mps_replicas:\nmps_sync_interval: ~\nenable_cuda_mps: null\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseHostConf("/etc/yunion/host.conf", []byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			want := DefaultHostConf()
			want.Path = "/etc/yunion/host.conf"
			got.Unknown = nil
			sameConf(t, got, want)
		})
	}
}

func TestDefaultHostConf(t *testing.T) {
	hc := DefaultHostConf()
	if hc.EnableCudaMPS || hc.CudaMPSReplicas != 10 || hc.CudaMPSPipeDirectory != "/tmp/nvidia-mps/pipe" ||
		hc.CudaMPSLogDirectory != "/tmp/nvidia-mps/log" || hc.ContainerDeviceConfigFile != "" {
		t.Errorf("Cloudpods' defaults changed: %+v", hc)
	}
	if hc.ViewLibrary != "/usr/lib/yunion-mps/libyunion-mps-view.so" {
		t.Errorf("mps_view_library defaults to %q, want where the package installs the library", hc.ViewLibrary)
	}
	if hc.Line("cuda_mps_replicas") != 0 {
		t.Errorf("a default has no line")
	}
}

func TestLoadHostConfCloudpodsFile(t *testing.T) {
	hc, err := LoadHostConf("testdata/host.conf")
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultHostConf()
	want.Path = "testdata/host.conf"
	want.EnableCudaMPS = true
	want.ContainerDeviceConfigFile = filepath.Join("testdata", "host_container_device.yml")
	want.CudaMPSPipeDirectory = "/run/nvidia-mps/pipe"
	want.CudaMPSReplicas = 4
	want.InventoryURL = "https://inventory.example.com:9330"
	want.InventoryTokenFile = "/etc/yunion/mps.token"
	want.InventoryTimeout = 5 * time.Second
	want.ListenAddress = "[::1]:9331"
	want.SetExclusiveComputeMode = false
	want.ControlTimeout = 90 * time.Second
	want.SyncInterval = 45 * time.Second
	want.HostName = "gpu-node-07"
	want.Unknown = []string{"port", "address", "master_address", "zone", "images_path",
		"local_image_path", "networks", "hostname", "report_interval", "enable_remote_executor"}
	sameConf(t, hc, want)
	if got := hc.Line("cuda_mps_replicas"); got != 20 {
		t.Errorf("cuda_mps_replicas is on line 20, Line says %d", got)
	}
}

func TestParseHostConfValues(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     func(*HostConf)
	}{
		{"duration as seconds", "mps_control_timeout: 3", func(h *HostConf) { h.ControlTimeout = 3 * time.Second }},
		{"duration quoted", `mps_sync_interval: "2m"`, func(h *HostConf) { h.SyncInterval = 2 * time.Minute }},
		{"bool yes", "enable_cuda_mps: yes", func(h *HostConf) { h.EnableCudaMPS = true }},
		{"bool True", "enable_cuda_mps: True", func(h *HostConf) { h.EnableCudaMPS = true }},
		{"quoted number", `cuda_mps_replicas: "7"`, func(h *HostConf) { h.CudaMPSReplicas = 7 }},
		{"directory cleaned", "mps_state_directory: /var/lib//mps/", func(h *HostConf) { h.StateDirectory = "/var/lib/mps" }},
		{"absolute device file kept", "container_device_config_file: /etc/x.yml", func(h *HostConf) { h.ContainerDeviceConfigFile = "/etc/x.yml" }},
		{"relative device file", "container_device_config_file: dev.yml", func(h *HostConf) { h.ContainerDeviceConfigFile = "/etc/yunion/dev.yml" }},
		{"relative token file", "mps_inventory_token_file: mps.token", func(h *HostConf) { h.InventoryTokenFile = "/etc/yunion/mps.token" }},
		{"listen on all addresses", "mps_listen_address: :9331", func(h *HostConf) { h.ListenAddress = ":9331" }},
		{"health interval", "mps_health_interval: 2s", func(h *HostConf) { h.HealthInterval = 2 * time.Second }},
		{"bounds are inclusive", "mps_sync_interval: 1s\nmps_health_interval: 10m\nmps_control_timeout: 2m\nmps_inventory_timeout: 1s\nmps_reload_hold_time: 1h", func(h *HostConf) {
			h.SyncInterval, h.HealthInterval, h.ControlTimeout, h.InventoryTimeout, h.ReloadHoldTime = time.Second, 10*time.Minute, 2*time.Minute, time.Second, time.Hour
		}},
		{"per-user MPS servers", "mps_multiuser_server: false", func(h *HostConf) { h.MultiUserServer = false }},
		{"accounting report", "mps_accounting: report", func(h *HostConf) { h.Accounting = AccountingReport }},
		{"cdi directory", "mps_cdi_directory: /etc/cdi", func(h *HostConf) { h.CDIDirectory = "/etc/cdi" }},
		{"host name as long as the inventory takes", "mps_host_name: " + strings.Repeat("h", 128), func(h *HostConf) { h.HostName = strings.Repeat("h", 128) }},
		{"host name as Cloudpods names hosts", "mps_host_name: gpu-node_01.dc1@rack2", func(h *HostConf) { h.HostName = "gpu-node_01.dc1@rack2" }},
		{"host name the region takes beyond ASCII", "mps_host_name: GPU 节点 1", func(h *HostConf) { h.HostName = "GPU 节点 1" }},
		{"view library elsewhere", "mps_view_library: /opt/mps//libyunion-mps-view.so", func(h *HostConf) { h.ViewLibrary = "/opt/mps/libyunion-mps-view.so" }},
		{"view off", `mps_view_library: ""`, func(h *HostConf) { h.ViewLibrary = "" }},
		{"pods off", `mps_pod_cgroup_parent: ""`, func(h *HostConf) { h.PodCgroupParent = "" }},
		{"pods elsewhere", "mps_pod_cgroup_parent: /pods/\nmps_containerd_state_directory: /run/k3s/containerd\nservers_path: /data/servers",
			func(h *HostConf) {
				h.PodCgroupParent, h.ContainerdStateDirectory, h.ServersPath = "/pods", "/run/k3s/containerd", "/data/servers"
			}},
		{"NRI", "mps_nri: true\nmps_nri_socket: /run/nri/nri.sock", func(h *HostConf) { h.NRI, h.NRISocket = true, "/run/nri/nri.sock" }},
		{"view off, key = value", "mps_view_library = \"\"\nenable_cuda_mps = true\n", func(h *HostConf) { h.ViewLibrary = ""; h.EnableCudaMPS = true }},
		{"TLS files", "mps_inventory_url: https://inventory.example:9330\nmps_inventory_ca_file: /etc/yunion/pki/ca.crt\nmps_inventory_cert_file: /etc/yunion/pki/gpu-1.crt\nmps_inventory_key_file: /etc/yunion/pki/gpu-1.key\nmps_web_config_file: /etc/yunion/mps-web.yml", func(h *HostConf) {
			h.InventoryURL = "https://inventory.example:9330"
			h.InventoryCAFile, h.InventoryCertFile, h.InventoryKeyFile = "/etc/yunion/pki/ca.crt", "/etc/yunion/pki/gpu-1.crt", "/etc/yunion/pki/gpu-1.key"
			h.WebConfigFile = "/etc/yunion/mps-web.yml"
		}},
		{"alias", "x: &n 6\ncuda_mps_replicas: *n", func(h *HostConf) { h.CudaMPSReplicas = 6; h.Unknown = []string{"x"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseHostConf("/etc/yunion/host.conf", []byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			want := DefaultHostConf()
			want.Path = "/etc/yunion/host.conf"
			tc.want(want)
			sameConf(t, got, want)
		})
	}
}

func TestParseHostConfErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"replicas not a number", "cuda_mps_replicas: abc", []string{`host.conf:1: cuda_mps_replicas: want a whole number, got "abc"`}},
		{"replicas zero", "port: 1\ncuda_mps_replicas: 0", []string{`host.conf:2: cuda_mps_replicas: must be at least 1, got 0`}},
		{"replicas a list", "cuda_mps_replicas:\n- 1\n", []string{`host.conf:2: cuda_mps_replicas: want a single value, got a list`}},
		{"replicas a fraction", "cuda_mps_replicas: 2.5", []string{`host.conf:1: cuda_mps_replicas: want a whole number, got "2.5"`}},
		{"bool", "enable_cuda_mps: maybe", []string{`host.conf:1: enable_cuda_mps: want true or false, got "maybe"`}},
		{"thread policy", "enable_cuda_mps: true\nzone: a\nmps_thread_percentage: 120\n", []string{`host.conf:3: mps_thread_percentage: "120": want auto, even, none, K/N or a percentage from 1 to 100`}},
		{"duration unit", "mps_sync_interval: 10x", []string{`host.conf:1: mps_sync_interval: want a duration such as "10s" or a number of seconds, got "10x"`}},
		{"duration zero", "mps_sync_interval: 0", []string{`host.conf:1: mps_sync_interval: must be positive, got "0"`}},
		{"duration negative", "mps_inventory_timeout: -5s", []string{`host.conf:1: mps_inventory_timeout: must be positive, got "-5s"`}},
		{"host name longer than the inventory takes", "mps_host_name: " + strings.Repeat("h", 10000), []string{`host.conf:1: mps_host_name: 10000 bytes, longer than the 128 the inventory allows for a host's name`}},
		{"host name with path separators and a right-to-left override", `mps_host_name: "../../é\u202e/x"`,
			[]string{`host.conf:1: mps_host_name: "../../é\u202e/x" is not a host name: it holds "/", which Cloudpods' region refuses in a name (/ \ ;)`}},
		{"host name with a right-to-left override", `mps_host_name: "gpu\u202e1"`,
			[]string{`host.conf:1: mps_host_name: "gpu\u202e1" is not a host name: it holds U+202E, a control or format character (or no UTF-8)`}},
		{"host name with a semicolon", `mps_host_name: "gpu;rm"`,
			[]string{`host.conf:1: mps_host_name: "gpu;rm" is not a host name: it holds ";", which Cloudpods' region refuses in a name (/ \ ;)`}},
		{"host name with a tab", `mps_host_name: "gpu\t1"`,
			[]string{`host.conf:1: mps_host_name: "gpu\t1" is not a host name: it holds U+0009, a control or format character (or no UTF-8)`}},
		{"host name ending with a space", `mps_host_name: "gpu1 "`,
			[]string{`host.conf:1: mps_host_name: "gpu1 " is not a host name: it begins or ends with a space, which Cloudpods' region trims (it would register "gpu1")`}},
		{"sync interval too short", "mps_sync_interval: 1ns", []string{`host.conf:1: mps_sync_interval: must be from 1s to 1h, got "1ns"`}},
		{"sync interval too long", "mps_sync_interval: 2h", []string{`host.conf:1: mps_sync_interval: must be from 1s to 1h, got "2h"`}},
		{"health interval too short", "port: 1\nmps_health_interval: 10ms", []string{`host.conf:2: mps_health_interval: must be from 1s to 10m, got "10ms"`}},
		{"control timeout too short", "mps_control_timeout: 0.5s", []string{`host.conf:1: mps_control_timeout: must be from 1s to 2m, got "0.5s"`}},
		{"control timeout too long", "mps_control_timeout: 3600", []string{`host.conf:1: mps_control_timeout: must be from 1s to 2m, got "3600"`}},
		{"inventory timeout too long", "mps_inventory_timeout: 5m", []string{`host.conf:1: mps_inventory_timeout: must be from 1s to 2m, got "5m"`}},
		{"hold time too short", "mps_reload_hold_time: 100ms", []string{`host.conf:1: mps_reload_hold_time: must be from 1s to 1h, got "100ms"`}},
		{"relative directory", "cuda_mps_pipe_directory: run/mps", []string{`host.conf:1: cuda_mps_pipe_directory: want an absolute path, got "run/mps"`}},
		{"log directory in the pipe directory", "cuda_mps_pipe_directory: /run/mps\ncuda_mps_log_directory: /run/mps/log/",
			[]string{`host.conf:2: cuda_mps_log_directory: the MPS log directory /run/mps/log is in the pipe directory /run/mps, which Cloudpods' pods mount read-write: a pod could write the log lines the daemon acts on; keep it out of the pipe directory`}},
		{"log directory the pipe directory", "cuda_mps_log_directory: /tmp/nvidia-mps/pipe",
			[]string{`host.conf:1: cuda_mps_log_directory: the MPS log directory /tmp/nvidia-mps/pipe is in the pipe directory /tmp/nvidia-mps/pipe, which Cloudpods' pods mount read-write: a pod could write the log lines the daemon acts on; keep it out of the pipe directory`}},
		{"pipe directory around the default log directory", "cuda_mps_pipe_directory: /tmp",
			[]string{`host.conf:1: cuda_mps_pipe_directory: the MPS log directory /tmp/nvidia-mps/log is in the pipe directory /tmp, which Cloudpods' pods mount read-write: a pod could write the log lines the daemon acts on; keep it out of the pipe directory`}},
		{"relative sysfs", "mps_sysfs_root: sys", []string{`host.conf:1: mps_sysfs_root: want an absolute path, got "sys"`}},
		{"url scheme", "mps_inventory_url: ftp://inv:21", []string{`host.conf:1: mps_inventory_url: want an http:// or https:// URL with a host, got "ftp://inv:21"`}},
		{"url without scheme", "mps_inventory_url: 127.0.0.1:9330", []string{`host.conf:1: mps_inventory_url: want an http:// or https:// URL with a host, got "127.0.0.1:9330"`}},
		{"listen port only", "mps_listen_address: 9331", []string{`host.conf:1: mps_listen_address: want host:port, got "9331"`}},
		{"listen port name", "mps_listen_address: localhost:http", []string{`host.conf:1: mps_listen_address: want host:port with a port number from 0 to 65535, got "localhost:http"`}},
		{"accounting policy", "mps_accounting: kill", []string{`host.conf:1: mps_accounting: "kill": want off, report or enforce`}},
		{"relative cdi directory", "mps_cdi_directory: cdi", []string{`host.conf:1: mps_cdi_directory: want an absolute path, got "cdi"`}},
		{"relative view library", "mps_view_library: libyunion-mps-view.so", []string{`host.conf:1: mps_view_library: want an absolute path, got "libyunion-mps-view.so"`}},
		{"relative cgroup parent", "mps_pod_cgroup_parent: cloudpods", []string{`host.conf:1: mps_pod_cgroup_parent: want an absolute path, got "cloudpods"`}},
		{"NRI not a bool", "mps_nri: sometimes", []string{`host.conf:1: mps_nri: want true or false, got "sometimes"`}},
		{"view library a list", "mps_view_library: [a]", []string{`host.conf:1: mps_view_library: want a single value, got a list`}},
		{"relative CA file", "mps_inventory_ca_file: ca.crt", []string{`host.conf:1: mps_inventory_ca_file: want an absolute path, got "ca.crt"`}},
		{"relative web config", "mps_web_config_file: web.yml", []string{`host.conf:1: mps_web_config_file: want an absolute path, got "web.yml"`}},
		{"client key without its certificate", "port: 1\nmps_inventory_key_file: /k.pem", []string{`host.conf:2: mps_inventory_key_file: set mps_inventory_cert_file too: the client certificate and its key go together`}},
		{"empty binary", `mps_control_binary: ""`, []string{`host.conf:1: mps_control_binary: must not be empty`}},
		{"top level list", "- enable_cuda_mps\n", []string{`host.conf:1: want key: value lines at the top level, got a list`}},
		{"top level scalar", "enable_cuda_mps\n", []string{`host.conf:1: want key: value lines at the top level, got "enable_cuda_mps"`}},
		{"syntax", "port: 1\nzone: [a,\n", []string{`host.conf:2: invalid YAML: did not find expected node content`}},
		{"duplicate", "cuda_mps_replicas: 2\nzone: z\ncuda_mps_replicas: 3\n", []string{`host.conf:3: cuda_mps_replicas: set again (first at line 1)`}},
		{"two documents", "enable_cuda_mps: true\n---\nenable_cuda_mps: false\n", []string{`host.conf:2: holds more than one YAML document (a second one starts here)`}},
		{"token twice", "mps_inventory_token: s3cret\nmps_inventory_token_file: /etc/t\n", []string{`host.conf:2: mps_inventory_token_file: set only one of mps_inventory_token (line 1) and mps_inventory_token_file`}},
		{"every error reported", "cuda_mps_replicas: -1\nzone: z\nmps_sync_interval: soon\nmps_dev_root: dev\n", []string{
			`host.conf:1: cuda_mps_replicas: must be at least 1, got -1`,
			`host.conf:3: mps_sync_interval: want a duration such as "10s" or a number of seconds, got "soon"`,
			`host.conf:4: mps_dev_root: want an absolute path, got "dev"`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hc, err := ParseHostConf("host.conf", []byte(tc.in))
			if err == nil {
				t.Fatalf("no error; got %+v", hc)
			}
			if got, want := err.Error(), strings.Join(tc.want, "\n"); got != want {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.File != "host.conf" {
				t.Errorf("want a *config.Error naming the file, got %#v", err)
			}
		})
	}
}

func TestLoadHostConfMissing(t *testing.T) {
	_, err := LoadHostConf(filepath.Join(t.TempDir(), "host.conf"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("want fs.ErrNotExist, got %v", err)
	}
}

func TestTokenValue(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	absent := filepath.Join(dir, "nope")
	defaultFile := write("default.token", "from-default\n")
	for _, tc := range []struct {
		name string
		// conf is host.conf's content; defaultFile stands in for
		// DefaultInventoryTokenFile, which a test cannot write.
		conf, defaultFile string
		want, wantErr     string
	}{
		{name: "none", conf: `mps_inventory_token_file: ""`, defaultFile: defaultFile, want: ""},
		{name: "inline", conf: "mps_inventory_token: \" abc \"", defaultFile: absent, want: "abc"},
		{name: "inline beats the default file", conf: "mps_inventory_token: abc", defaultFile: defaultFile, want: "abc"},
		{name: "file trimmed", conf: "mps_inventory_token_file: " + write("tok", "s3cret\n"), want: "s3cret"},
		{name: "empty file", conf: "mps_inventory_token_file: " + write("empty", "\n\n"), wantErr: "is empty"},
		{name: "missing file named in host.conf", conf: "mps_inventory_token_file: " + absent, wantErr: "no such file"},
		{name: "missing file at the default path", conf: "", defaultFile: absent, want: ""},
		{name: "the default file", conf: "enable_cuda_mps: true", defaultFile: defaultFile, want: "from-default"},
		{name: "the default file, empty", conf: "", defaultFile: write("empty-default", ""), wantErr: "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hc, err := ParseHostConf("/etc/yunion/host.conf", []byte(tc.conf))
			if err != nil {
				t.Fatal(err)
			}
			if hc.InventoryTokenFile == DefaultInventoryTokenFile {
				hc.InventoryTokenFile = tc.defaultFile
			}
			got, err := hc.TokenValue()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want error containing %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if DefaultHostConf().InventoryTokenFile != "/var/lib/yunion-mps/admin.token" {
		t.Errorf("default token file %q, want mps-inventory's --admin-token-file default", DefaultHostConf().InventoryTokenFile)
	}
}

func TestErrorString(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{"h.conf", 3, "k", "bad"}, "h.conf:3: k: bad"},
		{Error{"h.conf", 0, "k", "bad"}, "h.conf: k: bad"},
		{Error{"h.conf", 3, "", "bad"}, "h.conf:3: bad"},
		{Error{"h.conf", 0, "", "bad"}, "h.conf: bad"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// The keys host.conf takes are hostKeys' (one declaration each): every
// one is ours (not left to Cloudpods) and remembered with its line; a
// key outside the table is Cloudpods'.
func TestHostKeysAreTheTable(t *testing.T) {
	var conf strings.Builder
	for _, k := range hostKeys {
		conf.WriteString(k.name + ":\n")
	}
	conf.WriteString("mps_not_a_key: 1\n")
	hc, err := ParseHostConf("host.conf", []byte(conf.String()))
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range hostKeys {
		if hc.Line(k.name) != i+1 {
			t.Errorf("%s: line %d, want %d", k.name, hc.Line(k.name), i+1)
		}
	}
	if !slices.Equal(hc.Unknown, []string{"mps_not_a_key"}) {
		t.Errorf("left to Cloudpods: %v", hc.Unknown)
	}
}
