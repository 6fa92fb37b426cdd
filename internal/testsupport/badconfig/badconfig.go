// Package badconfig holds the configurations the daemon refuses, each with
// the check that refuses it and its message: tests/e2e runs every one
// through the Cloudpods mode's start, check-config and a live reload,
// tests/k8s through both modes' (issue 40: the Kubernetes mode started on
// configurations the other refused). A check added to agent.Validate needs
// a case here (tests/e2e fails without one).
package badconfig

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Case is an edit of host.conf or the device YAML of a host whose other
// files are good (the tests' simulated 8xH100 host).
type Case struct {
	Name string
	// Check is the check of agent.Validate that refuses it, "files" for
	// those made when the files are read.
	Check   string
	Conf    map[string]string // host.conf keys set, in one save ($DIR: the host's directory)
	Devices string            // the device YAML, when set ($GPU0: the simulated host's first GPU)
	// Want is in the message ($GPU0 as in Devices).
	Want string
}

// CloudpodsOnly reports a case refused for what only the Cloudpods mode
// reads: the inventory's token file and CA file and the region's CA file,
// wired at its start. The Kubernetes mode reads neither, so its start, its check-config
// and its reloads take them.
func (c Case) CloudpodsOnly() bool {
	return c.Check == "inventory token" || c.Check == "ssl_ca_certs" || c.Check == "inventory TLS files"
}

// claimsYAML shares the first GPU by claims of any size.
const claimsYAML = "devices:\n- path: /dev/dri/renderD128\n  type: NVIDIA_MPS\n  virtual_number: %d\n  sharing: claims\n"

// Cases are the refused configurations.
var Cases = []Case{
	// Issue 22: both used to be taken by a reload, arming a failing restart.
	{Name: "token file missing", Check: "inventory token", Conf: map[string]string{"mps_inventory_token_file": "/nonexistent"},
		Want: "reading mps_inventory_token_file: open /nonexistent: no such file or directory"},
	{Name: "pipe root of 150 characters", Check: "plan", Conf: map[string]string{"cuda_mps_pipe_directory": "/tmp/" + strings.Repeat("p", 145)},
		Want: "cuda_mps_pipe_directory: too long for the MPS sockets under it"},
	// Issue 22: check-config took it, then every reconcile failed.
	// Issue 34: path separators and a right-to-left override went to the
	// inventory as a host's name.
	{Name: "host name with path separators and a right-to-left override", Check: "files", Conf: map[string]string{"mps_host_name": `"../../é\u202e/x"`},
		Want: `mps_host_name: "../../é\u202e/x" is not a host name: it holds "/", which Cloudpods' region refuses in a name (/ \ ;)`},
	{Name: "host name with a right-to-left override", Check: "files", Conf: map[string]string{"mps_host_name": `"gpu\u202e1"`},
		Want: `mps_host_name: "gpu\u202e1" is not a host name: it holds U+202E, a control or format character (or no UTF-8)`},
	{Name: "host name of 10,000 bytes", Check: "files", Conf: map[string]string{"mps_host_name": strings.Repeat("h", 10000)},
		Want: "mps_host_name: 10000 bytes, longer than the 128 the inventory allows for a host's name"},
	{Name: "entry names no GPU present", Check: "plan", Devices: "devices:\n- path: /dev/dri/renderD150\n  type: NVIDIA_MPS\n  virtual_number: 2\n",
		Want: "devices.yml:2"},
	// Issue 40: the Kubernetes mode started on these, and on the three
	// forms of one GPU named twice and the virtual_number of 49 below.
	{Name: "entry names a minor number no GPU has", Check: "plan", Devices: "devices:\n- path: /dev/nvidia9\n  type: NVIDIA_MPS\n  virtual_number: 2\n",
		Want: "devices.yml:2: devices[0].path: /dev/nvidia9: no GPU seen by NVML has minor number 9 (minor numbers: 0, 1, 2, 3, 4, 5, 6, 7)"},
	{Name: "entry names a UUID no GPU has", Check: "plan", Devices: "devices:\n- path: GPU-00000000-0000-0000-0000-000000000000\n  type: NVIDIA_MPS\n  virtual_number: 2\n",
		Want: "devices.yml:2: devices[0].path: GPU UUID GPU-00000000-0000-0000-0000-000000000000 is not a GPU seen by NVML"},
	// Issue 33: one GPU named twice, by its node and by its UUID, is
	// refused naming both entries.
	{Name: "one GPU named twice", Check: "plan", Devices: "devices:\n- path: /dev/nvidia0\n  type: NVIDIA_MPS\n  virtual_number: 2\n- path: $GPU0\n  type: NVIDIA_MPS\n  virtual_number: 4\n",
		Want: `devices.yml:5: devices[1].path: "$GPU0" and devices[0].path ("/dev/nvidia0", line 2) name the same GPU, 0000:18:00.0 ($GPU0): keep one entry per GPU`},
	{Name: "one GPU named twice by its render node and its address", Check: "plan",
		Devices: "devices:\n- path: /dev/dri/renderD128\n  type: NVIDIA_MPS\n  virtual_number: 2\n- path: 0000:18:00.0\n  type: NVIDIA_MPS\n  virtual_number: 2\n",
		Want:    `devices.yml:5: devices[1].path: "0000:18:00.0" and devices[0].path ("/dev/dri/renderD128", line 2) name the same GPU, 0000:18:00.0 ($GPU0): keep one entry per GPU`},
	{Name: "one GPU named twice by its short address and its by-path link", Check: "plan",
		Devices: "devices:\n- path: \"18:00.0\"\n  type: NVIDIA_MPS\n  virtual_number: 2\n- path: /dev/dri/by-path/pci-0000:18:00.0-render\n  type: NVIDIA_MPS\n  virtual_number: 2\n",
		Want:    `devices.yml:5: devices[1].path: "/dev/dri/by-path/pci-0000:18:00.0-render" and devices[0].path ("18:00.0", line 2) name the same GPU, 0000:18:00.0 ($GPU0): keep one entry per GPU`},
	{Name: "virtual_number 49", Check: "plan", Devices: "devices:\n- path: /dev/dri/renderD128\n  type: NVIDIA_MPS\n  virtual_number: 49\n",
		Want: "devices.yml:2: devices[0].virtual_number: 49 virtual devices exceed the 48 MPS clients a Hopper GPU accepts (NVIDIA H100 80GB HBM3 $GPU0 at 0000:18:00.0)"},
	{Name: "virtual_number 49 with claims", Check: "plan", Devices: fmt.Sprintf(claimsYAML, 49),
		Want: "devices.yml:2: devices[0].virtual_number: 49 claims exceed the 48 MPS clients a Hopper GPU accepts (NVIDIA H100 80GB HBM3 $GPU0 at 0000:18:00.0)"},
	{Name: "claims under the single pipe layout", Check: "plan", Conf: map[string]string{"mps_pipe_layout": "single"}, Devices: fmt.Sprintf(claimsYAML, 4),
		Want: "devices.yml:2: devices[0].sharing: sharing: claims needs a control daemon of the GPU's own (mps_pipe_layout per-gpu)"},
	{Name: "CA file without a certificate", Check: "ssl_ca_certs", Conf: map[string]string{
		"mps_inventory_backend": "region", "auth_url": "http://127.0.0.1:1/v3", "admin_user": "a", "admin_password": "b", "ssl_ca_certs": "$DIR/not-a-ca.crt"},
		Want: "not-a-ca.crt holds no PEM certificate"},
	{Name: "listen address of another machine", Check: "listen address", Conf: map[string]string{"mps_listen_address": "192.0.2.1:9331"},
		Want: "mps_listen_address: 192.0.2.1 is not an address of this machine"},
	// Issue 47: a web configuration the listener could not serve, a CA file
	// no connection to the inventory could verify with.
	{Name: "web config file with a misspelt key", Check: "web config file", Conf: map[string]string{"mps_web_config_file": "$DIR/bad-web.yml"},
		Want: "bad-web.yml: yaml: unmarshal errors:; line 2: field cert_flie not found in type web.TLSConfig"},
	{Name: "inventory CA file without a certificate", Check: "inventory TLS files", Conf: map[string]string{"mps_inventory_ca_file": "$DIR/not-a-ca.crt"},
		Want: "not-a-ca.crt: no PEM certificate in it"},
	{Name: "client certificate without its key", Check: "files", Conf: map[string]string{"mps_inventory_cert_file": "$DIR/host.crt"},
		Want: "mps_inventory_cert_file: set mps_inventory_key_file too: the client certificate and its key go together"},
	{Name: "sync interval 1ns", Check: "files", Conf: map[string]string{"mps_sync_interval": "1ns"},
		Want: `mps_sync_interval: must be from 1s to 1h, got "1ns"`},
}

// Apply makes c's edit in the files of the host in dir (host.conf at
// hostConf, the device YAML at devices), each saved in one rename, as an
// editor does; gpu0 is the UUID of the host's first GPU.
func Apply(dir, hostConf, devices, gpu0 string, c Case) error {
	if err := os.WriteFile(filepath.Join(dir, "not-a-ca.crt"), []byte("not a certificate\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bad-web.yml"), []byte("tls_server_config:\n  cert_flie: server.crt\n"), 0o644); err != nil {
		return err
	}
	if c.Devices != "" {
		if err := SaveAtomic(devices, strings.ReplaceAll(c.Devices, "$GPU0", gpu0)); err != nil {
			return err
		}
	}
	if len(c.Conf) == 0 {
		return nil
	}
	b, err := os.ReadFile(hostConf)
	if err != nil {
		return err
	}
	s := string(b)
	for _, k := range slices.Sorted(maps.Keys(c.Conf)) { // one order: the lines are in the messages
		line := k + ": " + strings.ReplaceAll(c.Conf[k], "$DIR", dir)
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(k) + `:.*$`)
		if re.MatchString(s) {
			s = re.ReplaceAllLiteralString(s, line)
		} else {
			s += line + "\n"
		}
	}
	return SaveAtomic(hostConf, s)
}

// SaveAtomic replaces path's content in one rename.
func SaveAtomic(path, content string) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Message is the error a mps-daemon run ended with (after "mps-daemon: "
// on its stderr), dir written $DIR.
func Message(stderr, dir string) string {
	_, msg, _ := strings.Cut(stderr, "mps-daemon: ")
	return strings.ReplaceAll(strings.TrimSpace(msg), dir, "$DIR")
}

// Expect is c's Want with $GPU0 filled in.
func (c Case) Expect(gpu0 string) string { return strings.ReplaceAll(c.Want, "$GPU0", gpu0) }
