package config

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A host.conf as Cloudpods' host agent has it (its YAML keys, some with -,
// some through their aliases), with nothing of ours: the region backend,
// the single pipe layout and Cloudpods' thread rule follow from it.
const cloudpodsHostConf = `region: region0
auth_uri: https://10.0.0.1:30357/v3
admin-user: regionadmin
admin_passwd: "s3cret"
admin_tenant_name: system
session_endpoint_type: internal
ssl_ca_certs: /etc/yunion/pki/ca.crt
host_type: container
networks: ["eth0/br0/10.0.0.5"]
enable_cuda_mps: true
`

func TestCloudpodsKeysChooseTheRegion(t *testing.T) {
	hc, err := ParseHostConf("host.conf", []byte(cloudpodsHostConf))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := hc.CloudpodsSettings()
	if err != nil {
		t.Fatal(err)
	}
	want := Cloudpods{AuthURL: "https://10.0.0.1:30357/v3", AdminUser: "regionadmin", AdminPassword: "s3cret",
		AdminProject: "system", Region: "region0", SessionEndpointType: "internal", SSLCACerts: "/etc/yunion/pki/ca.crt"}
	if cp != want {
		t.Errorf("settings\n got %+v\nwant %+v", cp, want)
	}
	if hc.Backend() != BackendRegion || hc.Layout() != LayoutSingle || hc.Threads != EvenThreads {
		t.Errorf("backend %s layout %s threads %s, want region, single, even", hc.Backend(), hc.Layout(), hc.Threads)
	}
	if hc.Line("auth_url") != 2 || hc.Line("admin_password") != 4 {
		t.Errorf("lines of auth_url %d admin_password %d, want 2 and 4", hc.Line("auth_url"), hc.Line("admin_password"))
	}
	if strings.Join(hc.Unknown, ",") != "host_type,networks" {
		t.Errorf("unknown keys %v", hc.Unknown)
	}
}

func TestExplicitKeysChooseBackendAndLayout(t *testing.T) {
	for _, tc := range []struct {
		extra, backend, layout, threads string
	}{
		// An explicit inventory URL keeps the standalone inventory.
		{"mps_inventory_url: http://10.0.0.9:9330\n", BackendInventory, LayoutPerGPU, "auto (400/N)"},
		{"mps_inventory_backend: inventory\n", BackendInventory, LayoutPerGPU, "auto (400/N)"},
		{"mps_inventory_backend: inventory\nmps_pipe_layout: single\n", BackendInventory, LayoutSingle, "auto (400/N)"},
		{"mps_pipe_layout: per_gpu\nmps_thread_percentage: 200/N\n", BackendRegion, LayoutPerGPU, "200/N"},
		{"mps_inventory_url: http://10.0.0.9:9330\nmps-inventory-backend: region\n", BackendRegion, LayoutSingle, "even (100/N)"},
	} {
		hc, err := ParseHostConf("host.conf", []byte(cloudpodsHostConf+tc.extra))
		if err != nil {
			t.Errorf("%q: %v", tc.extra, err)
			continue
		}
		if hc.Backend() != tc.backend || hc.Layout() != tc.layout || hc.Threads.String() != tc.threads {
			t.Errorf("%q: backend %s layout %s threads %s, want %s %s %s", tc.extra, hc.Backend(), hc.Layout(), hc.Threads, tc.backend, tc.layout, tc.threads)
		}
	}
	hc, err := ParseHostConf("host.conf", []byte("enable_cuda_mps: true\n"))
	if err != nil || hc.Backend() != BackendInventory || hc.Layout() != LayoutPerGPU {
		t.Errorf("no Cloudpods keys: %v backend %s layout %s", err, hc.Backend(), hc.Layout())
	}
}

func TestCloudpodsKeyErrors(t *testing.T) {
	for _, tc := range []struct{ conf, want string }{
		{"mps_inventory_backend: region\n", "host.conf:1: auth_url: the region backend needs keystone's URL"},
		{"auth_url: keystone:5000\nadmin_user: a\nadmin_password: b\n", "host.conf:1: auth_url: want keystone's http(s)"},
		{"auth_url: http://k/v3\nadmin_password: b\n", "admin_user: the region backend needs"},
		{"auth_url: http://k/v3\nauth_uri: http://other/v3\n", "host.conf:2: auth_uri: sets auth_url again with another value (first at line 1)"},
		{"auth_uri: http://k/v3\nauth_url: http://other/v3\n", "host.conf:2: auth_url: sets auth_url again with another value (first at line 1)"},
		{"auth_url: http://k/v3\nauth-url: http://other/v3\n", "host.conf:2: auth_url: sets auth_url again with another value (first at line 1)"},
		{"admin_user: a\nadmin_user: b\n", "host.conf:2: admin_user: sets admin_user again with another value (first at line 1)"},
		{"mps_pipe_layout: both\n", `host.conf:1: mps_pipe_layout: "both": want one of auto, per-gpu, single`},
		{"mps_region_host_mac: eth0\n", "mps_region_host_mac: want a MAC address"},
		{"mps_region_device_model: old\n", "mps_region_device_model"},
		{"auth_url: http://k/v3\nadmin_user: a\nadmin_password: b\nsession_endpoint_type: private\n", "session_endpoint_type"},
	} {
		_, err := ParseHostConf("host.conf", []byte(tc.conf))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.conf, err, tc.want)
		}
	}
	// The same value under both spellings is no conflict.
	if _, err := ParseHostConf("host.conf", []byte("auth_url: http://k/v3\nauth_uri: http://k/v3\nadmin_user: a\nadmin_password: b\n")); err != nil {
		t.Errorf("same value twice: %v", err)
	}
}

// Cloudpods reads a host.conf that is not YAML as key = value lines.
func TestKeyValueForm(t *testing.T) {
	conf := `# written by an old deployment
[DEFAULT]
auth_url = http://10.0.0.1:5000/v3
admin_user = sysadmin
admin_password = 'p@ss=word'
enable_cuda_mps = true
cuda_mps_replicas = 4
mps_sync_interval =
`
	hc, err := ParseHostConf("host.conf", []byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	if hc.Cloudpods.AdminPassword != "p@ss=word" || !hc.EnableCudaMPS || hc.CudaMPSReplicas != 4 || hc.Backend() != BackendRegion {
		t.Errorf("read %+v", hc)
	}
	if hc.Line("cuda_mps_replicas") != 7 {
		t.Errorf("cuda_mps_replicas at line %d, want 7", hc.Line("cuda_mps_replicas"))
	}
	_, err = ParseHostConf("host.conf", []byte("cuda_mps_replicas = 0\n"))
	if err == nil || !strings.Contains(err.Error(), "host.conf:1: cuda_mps_replicas: must be at least 1") {
		t.Errorf("a bad value in key = value form: %v", err)
	}
	// Neither YAML nor key = value: the YAML error stands.
	_, err = ParseHostConf("host.conf", []byte("enable_cuda_mps: [\n"))
	if err == nil || !strings.Contains(err.Error(), "invalid YAML") {
		t.Errorf("broken file: %v", err)
	}
}

// ssl_ca_certs is a file host.conf names like any other: relative to
// host.conf's folder, and read without ever blocking on a FIFO or reading
// a huge file whole.
func TestCACertsFile(t *testing.T) {
	dir := t.TempDir()
	conf := "auth_url: https://keystone:30357/v3\nadmin_user: regionadmin\nadmin_password: x\nssl_ca_certs: pki/ca.crt\n"
	hc, err := ParseHostConf(filepath.Join(dir, "host.conf"), []byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := hc.CloudpodsSettings()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "pki", "ca.crt"); cp.SSLCACerts != want {
		t.Fatalf("ssl_ca_certs = %s, want %s", cp.SSLCACerts, want)
	}
	if err := os.MkdirAll(filepath.Join(dir, "pki"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cp.SSLCACerts, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A file with no certificate in it would fail the keystone client at
	// start: refused here, where check-config and a reload see it.
	if _, err := cp.CACerts(); err == nil || !strings.Contains(err.Error(), "ssl_ca_certs "+cp.SSLCACerts+" holds no PEM certificate") {
		t.Errorf("CACerts of a file without a certificate: %v", err)
	}
	ca, err := os.ReadFile(filepath.Join("testdata", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cp.SSLCACerts, ca, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := cp.CACerts(); err != nil || len(b) == 0 {
		t.Errorf("CACerts of a regular file: %d bytes, %v", len(b), err)
	}
	if err := os.Remove(cp.SSLCACerts); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(cp.SSLCACerts, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.CACerts(); err == nil || !strings.Contains(err.Error(), "ssl_ca_certs") || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a FIFO at ssl_ca_certs: %v, want an error naming the key and the file type", err)
	}
	if b, err := (Cloudpods{}).CACerts(); b != nil || err != nil {
		t.Errorf("no ssl_ca_certs: %q, %v", b, err)
	}
}

// Every spelling of a Cloudpods key lands in its setting.
func TestEveryCloudpodsKeyIsStored(t *testing.T) {
	needed := map[string]string{"auth_url": "http://k/v3", "admin_user": "a", "admin_password": "b"}
	for key, canon := range cloudpodsAliases {
		value := map[string]string{"auth_url": "http://v/v3", "session_endpoint_type": "public"}[canon]
		if value == "" {
			value = "v"
		}
		conf := key + ": " + value + "\n"
		for k, v := range needed {
			if k != canon {
				conf += k + ": " + v + "\n"
			}
		}
		hc, err := ParseHostConf("host.conf", []byte(conf))
		if err != nil {
			t.Errorf("%s: %v", key, err)
			continue
		}
		if got := *hc.Cloudpods.field(canon); got != value {
			t.Errorf("%s: %s = %q, want %q", key, canon, got, value)
		}
	}
}
