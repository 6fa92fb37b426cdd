// Package config reads the two files an operator edits: host.conf, which this
// daemon shares with the Cloudpods host service, and the container device YAML
// that says how many virtual devices each GPU is split into. Both are parsed
// into YAML node trees so every error names the file, the line and the key.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/restcall"
	"yunion.io/x/mps-daemon/pkg/webtls"
)

// DefaultHostConfPath is where Cloudpods keeps host.conf.
const DefaultHostConfPath = "/etc/yunion/host.conf"

// DefaultViewLibrary is mps_view_library's default: where the
// yunion-mps-daemon package installs the library.
const DefaultViewLibrary = "/usr/lib/yunion-mps/libyunion-mps-view.so"

// DefaultInventoryTokenFile is mps_inventory_token_file's default: where a
// local mps-inventory keeps its admin token (its --admin-token-file
// default), so the daemon and climc on that host find it with no setting.
const DefaultInventoryTokenFile = "/var/lib/yunion-mps/admin.token"

// HostConf holds the host.conf keys this daemon reads. The first five are
// Cloudpods' own keys with Cloudpods' defaults; the mps_* keys are ours.
type HostConf struct {
	// Path is the file that was read; empty for DefaultHostConf.
	Path string

	EnableCudaMPS bool
	// ContainerDeviceConfigFile is the device YAML; a relative value in the
	// file is resolved against host.conf's directory. Empty: none.
	ContainerDeviceConfigFile string
	CudaMPSPipeDirectory      string
	CudaMPSLogDirectory       string
	// CudaMPSReplicas is N for every GPU when no device YAML entry names one.
	CudaMPSReplicas int

	InventoryURL       string
	InventoryToken     string
	InventoryTokenFile string
	InventoryTimeout   time.Duration
	// InventoryCAFile holds the CAs that may sign an https://
	// InventoryURL's certificate (empty: the system's roots);
	// InventoryCertFile and InventoryKeyFile the host's client
	// certificate, when the inventory asks for one (InventoryTLS).
	InventoryCAFile, InventoryCertFile, InventoryKeyFile string
	// ListenAddress serves metrics and health checks; WebConfigFile is
	// its web configuration (TLS, basic auth; empty: plain HTTP).
	ListenAddress           string
	WebConfigFile           string
	StateDirectory          string
	SetExclusiveComputeMode bool
	ControlBinary           string
	ControlTimeout          time.Duration
	SyncInterval            time.Duration
	// HealthInterval is how often each GPU's control daemon and servers
	// are probed (a dead daemon, a server in FAULT).
	HealthInterval time.Duration
	// MultiUserServer starts control daemons with -multiuser-server, so
	// containers of different UIDs share a GPU at once (docs/containers.md).
	MultiUserServer bool
	// CDIDirectory is where the host's CDI spec is written.
	CDIDirectory string
	// CDIShmPath is the host's shared memory mounted into containers at
	// /dev/shm; "none" leaves it out (docs/containers.md).
	CDIShmPath string
	// ViewLibrary is the host's libyunion-mps-view.so, mounted into every
	// container of a virtual device so that it sees its slice as its GPU
	// (docs/containers.md, "What software in a slice sees"); empty: off.
	ViewLibrary string
	// Accounting is the per-virtual-device memory policy: off, report or
	// enforce (docs/containers.md).
	Accounting AccountingPolicy
	// ProcRoot is /proc, read to map MPS clients to virtual devices.
	ProcRoot string
	// Threads is mps_thread_percentage, the thread policy (auto, even,
	// none, K/N or a percentage; threads.go).
	Threads ThreadPolicy
	// HostName is the name registered in the inventory; empty means the
	// caller uses os.Hostname.
	HostName  string
	SysfsRoot string
	DevRoot   string
	// ReloadHoldTime is how long a reload that would take every device
	// away, or drop the device YAML's entries for cuda_mps_replicas, waits
	// with the files unchanged before it is applied (docs/operations.md).
	ReloadHoldTime time.Duration

	// Cloudpods are Cloudpods' own keys (auth_url, admin_user, ...); the
	// rest are ours for a Cloudpods host (cloudpods.go, docs/cloudpods.md).
	Cloudpods         Cloudpods
	InventoryBackend  string // mps_inventory_backend: auto, inventory, region
	PipeLayout        string // mps_pipe_layout: auto, per-gpu, single
	RegionDeviceModel string // mps_region_device_model: auto, gpu, per-slice
	RegionHostMAC     string // mps_region_host_mac: the MAC to find the host record by
	RegionCreateHost  bool   // mps_region_create_host: create a missing host record
	RegionInsecureTLS bool   // mps_region_insecure_tls: skip TLS verification

	// Cloudpods' own pods (issue 45, docs/cloudpods.md "Cloudpods' own
	// pods"): PodCgroupParent is the cgroup its host agent makes pods'
	// containers under (mps_pod_cgroup_parent; "" looks for no pod),
	// ContainerdStateDirectory containerd's state directory, whose bundles
	// say each container's server (mps_containerd_state_directory),
	// ServersPath Cloudpods' host agent's own record of its servers
	// (servers_path, its key), read where containerd's is not.
	PodCgroupParent          string
	ContainerdStateDirectory string
	ServersPath              string
	// NRI: the daemon's NRI plugin gives a pod's containers the edits of
	// a CDI entry of a slice their server holds (mps_nri, best effort),
	// through containerd's NRI socket (mps_nri_socket).
	NRI       bool
	NRISocket string

	// Unknown lists the keys this daemon does not read, in file order. Most
	// belong to the Cloudpods host service; callers log them at debug level
	// so a misspelt key of ours can still be found.
	Unknown []string

	// lines maps each key set in the file to its line.
	lines map[string]int
}

// DefaultHostConf is the configuration of an empty host.conf.
func DefaultHostConf() *HostConf {
	return &HostConf{
		CudaMPSPipeDirectory:     "/tmp/nvidia-mps/pipe",
		CudaMPSLogDirectory:      "/tmp/nvidia-mps/log",
		CudaMPSReplicas:          10,
		InventoryURL:             "http://127.0.0.1:9330",
		InventoryTokenFile:       DefaultInventoryTokenFile,
		InventoryTimeout:         10 * time.Second,
		ListenAddress:            "127.0.0.1:9331",
		StateDirectory:           "/var/lib/yunion-mps",
		SetExclusiveComputeMode:  true,
		ControlBinary:            "nvidia-cuda-mps-control",
		ControlTimeout:           10 * time.Second,
		SyncInterval:             30 * time.Second,
		HealthInterval:           10 * time.Second,
		MultiUserServer:          true,
		CDIDirectory:             "/var/run/cdi",
		CDIShmPath:               "/dev/shm",
		ViewLibrary:              DefaultViewLibrary,
		Accounting:               AccountingEnforce,
		ProcRoot:                 "/proc",
		Threads:                  AutoThreads,
		SysfsRoot:                "/sys",
		DevRoot:                  "/dev",
		ReloadHoldTime:           30 * time.Second,
		InventoryBackend:         BackendAuto,
		PipeLayout:               LayoutAuto,
		RegionDeviceModel:        DeviceModelAuto,
		PodCgroupParent:          "/cloudpods",
		ContainerdStateDirectory: "/run/containerd",
		ServersPath:              "/opt/cloud/workspace/servers",
		NRISocket:                "/var/run/nri/nri.sock",
	}
}

// Line is the line of key in the file, 0 when the file does not set it. Other
// packages use it to point their own errors at the setting that caused them.
func (hc *HostConf) Line(key string) int {
	return hc.lines[key]
}

// TokenValue is the inventory token: mps_inventory_token when set, else the
// trimmed content of mps_inventory_token_file (so the secret can live in a
// file readable by root only). When host.conf does not set the file, it is
// DefaultInventoryTokenFile, and that file missing means no token (no
// local inventory wrote one), not an error; a file host.conf names must
// exist. `mps_inventory_token_file: ""` turns the default off.
func (hc *HostConf) TokenValue() (string, error) {
	if token := strings.TrimSpace(hc.InventoryToken); token != "" || hc.InventoryTokenFile == "" {
		return token, nil
	}
	data, err := ReadFile(hc.InventoryTokenFile, MaxTokenBytes)
	if errors.Is(err, fs.ErrNotExist) && hc.Line("mps_inventory_token_file") == 0 {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading mps_inventory_token_file: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("mps_inventory_token_file %s is empty", hc.InventoryTokenFile)
	}
	return token, nil
}

// InventoryTLS is how a client of mps_inventory_url verifies it and,
// when the inventory asks, proves the host: mps_inventory_ca_file,
// mps_inventory_cert_file and mps_inventory_key_file, read again at each
// new connection (webtls.Client).
func (hc *HostConf) InventoryTLS() webtls.Client {
	return webtls.Client{
		CAFile: hc.InventoryCAFile, CertFile: hc.InventoryCertFile, KeyFile: hc.InventoryKeyFile,
		CASetting: "mps_inventory_ca_file", CertSetting: "mps_inventory_cert_file",
	}
}

// Listener is the daemon's listener of /healthz, /readyz, /status and
// /metrics: mps_listen_address, served as mps_web_config_file says
// (webtls.Listener; checked at start, by check-config and on a reload).
func (hc *HostConf) Listener() webtls.Listener {
	return webtls.Listener{
		Address: hc.ListenAddress, WebConfigFile: hc.WebConfigFile,
		AddressSetting: "mps_listen_address", WebConfigSetting: "mps_web_config_file",
		InClear: "serving /metrics and /status in plain HTTP beyond loopback: anyone on the network reads the GPUs, the virtual devices and the guests holding them (and basic auth's passwords, if set); give mps_web_config_file with tls_server_config (docs/monitoring.md)",
	}
}

// LoadHostConf reads and checks host.conf. A missing file is an error that
// satisfies errors.Is(err, fs.ErrNotExist).
func LoadHostConf(path string) (*HostConf, error) {
	data, err := ReadFile(path, MaxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("reading host config: %w", err)
	}
	return ParseHostConf(path, data)
}

// ParseHostConf checks host.conf's content; path is only used in messages
// and to resolve relative file names. Every problem is reported, joined with
// errors.Join, each as an *Error with its line.
func ParseHostConf(path string, data []byte) (*HostConf, error) {
	hc := DefaultHostConf()
	hc.Path = path
	hc.lines = map[string]int{}
	root, err := parseDocument(path, data)
	if err != nil || (root != nil && root.Kind != yaml.MappingNode) {
		// Cloudpods reads a file that is not YAML as `key = value` lines.
		if kv, ok := parseKeyValueLines(data); ok {
			root, err = kv, nil
		}
	}
	if err != nil {
		return nil, err
	}
	if root == nil {
		return hc, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, errorf(path, root.Line, "", "want key: value lines at the top level, got %s", describe(root))
	}
	var errs []error
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], deref(root.Content[i+1])
		key := normalizeKey(k.Value) // Cloudpods reads - and _ alike
		hk, ours := hostKeyByName[key]
		if !ours {
			if handled, err := hc.setCloudpods(key, k, v); handled {
				if err != nil {
					errs = append(errs, errorf(path, v.Line, key, "%v", err))
				}
				continue
			}
			hc.Unknown = append(hc.Unknown, k.Value)
			continue
		}
		if first, dup := hc.lines[key]; dup {
			errs = append(errs, errorf(path, k.Line, key, "set again (first at line %d)", first))
			continue
		}
		hc.lines[key] = k.Line
		if isNull(v) {
			continue // `key:` with nothing after it keeps the default
		}
		if err := hk.read(hc, v); err != nil {
			errs = append(errs, errorf(path, v.Line, key, "%v", err))
		}
	}
	dir := filepath.Dir(path)
	if f := hc.ContainerDeviceConfigFile; f != "" && !filepath.IsAbs(f) {
		hc.ContainerDeviceConfigFile = filepath.Join(dir, f)
	}
	if f := hc.InventoryTokenFile; f != "" && !filepath.IsAbs(f) {
		hc.InventoryTokenFile = filepath.Join(dir, f)
	}
	if f := hc.Cloudpods.SSLCACerts; f != "" && !filepath.IsAbs(f) {
		hc.Cloudpods.SSLCACerts = filepath.Join(dir, f)
	}
	if (hc.InventoryCertFile == "") != (hc.InventoryKeyFile == "") {
		set, unset := "mps_inventory_cert_file", "mps_inventory_key_file"
		if hc.InventoryCertFile == "" {
			set, unset = unset, set
		}
		errs = append(errs, errorf(path, hc.lines[set], set, "set %s too: the client certificate and its key go together", unset))
	}
	if hc.InventoryToken != "" && hc.InventoryTokenFile != "" && hc.Line("mps_inventory_token_file") > 0 {
		errs = append(errs, errorf(path, hc.lines["mps_inventory_token_file"], "mps_inventory_token_file",
			"set only one of mps_inventory_token (line %d) and mps_inventory_token_file", hc.lines["mps_inventory_token"]))
	}
	if err := hc.checkLogDirectory(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, hc.checkCloudpods()...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return hc, nil
}

// checkLogDirectory refuses an MPS log directory in the pipe directory or
// under it. Cloudpods' pods get the pipe root mounted read-write, and the
// accounting acts on the lines of the control daemons' control.log and
// their servers' server.log: a tenant that could write them could have a
// client killed before its context is up, which wedges its MPS server for
// every tenant of the GPU (pkg/mps/serverlog.go).
func (hc *HostConf) checkLogDirectory() *Error {
	pipe, logs := filepath.Clean(hc.CudaMPSPipeDirectory), filepath.Clean(hc.CudaMPSLogDirectory)
	rel, err := filepath.Rel(pipe, logs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil
	}
	key := "cuda_mps_log_directory"
	if hc.Line(key) == 0 {
		key = "cuda_mps_pipe_directory"
	}
	return errorf(hc.Path, hc.Line(key), key, "the MPS log directory %s is in the pipe directory %s, which Cloudpods' pods mount read-write: "+
		"a pod could write the log lines the daemon acts on; keep it out of the pipe directory", logs, pipe)
}

// virtualNumber reads a number of virtual devices (cuda_mps_replicas, a
// device entry's virtual_number): 0 would split a GPU into nothing.
func virtualNumber(v *yaml.Node) (int, error) {
	n, err := intValue(v)
	if err != nil {
		return 0, err
	}
	if n < 1 {
		return 0, fmt.Errorf("must be at least 1, got %d", n)
	}
	return n, nil
}

// absPath requires an absolute path: the daemon runs from systemd with /
// as its working directory, so a relative one would land somewhere unexpected.
func absPath(v *yaml.Node) (string, error) {
	s, err := scalarValue(v)
	if err != nil {
		return "", err
	}
	if !filepath.IsAbs(s) {
		return "", fmt.Errorf("want an absolute path, got %s", describe(v))
	}
	return filepath.Clean(s), nil
}

// hostName is mps_host_name, the name of the host's record in the
// inventory: bounded as the inventory bounds a host's name, and a name the
// Cloudpods region takes as it is (hostNameProblem), so a name either would
// refuse at every reconcile, or one that carries path separators or
// control and direction characters into the inventory, its logs and
// tables, is refused here: by check-config, at start and on a reload
// alike.
func hostName(v *yaml.Node) (string, error) {
	s, err := scalarValue(v)
	if err != nil {
		return "", err
	}
	if len(s) > api.MaxNameBytes {
		return "", fmt.Errorf("%d bytes, longer than the %d the inventory allows for a host's name", len(s), api.MaxNameBytes)
	}
	if why := hostNameProblem(s); why != "" {
		return "", fmt.Errorf("%q is not a host name: %s", s, why)
	}
	return s, nil
}

// hostNameProblem says why s is no name the region takes as it is, or "":
// api.NameProblem (the region refuses / \ ; line breaks and tabs, and
// control and format characters are refused as well), and white space at
// either end, which the region trims (the host would be registered under
// another name).
func hostNameProblem(s string) string {
	if why := api.NameProblem(s); why != "" {
		return why
	}
	if strings.TrimSpace(s) != s {
		return fmt.Sprintf("it begins or ends with a space, which Cloudpods' region trims (it would register %q)", strings.TrimSpace(s))
	}
	return ""
}

func nonEmpty(v *yaml.Node) (string, error) {
	s, err := scalarValue(v)
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(s) == "" {
		return "", errors.New("must not be empty")
	}
	return s, nil
}

func httpURL(v *yaml.Node) (string, error) {
	s, err := scalarValue(v)
	if err != nil {
		return "", err
	}
	if !restcall.IsHTTPURL(s) {
		return "", fmt.Errorf("want an http:// or https:// URL with a host, got %s", describe(v))
	}
	return s, nil
}

func hostPort(v *yaml.Node) (string, error) {
	s, err := scalarValue(v)
	if err != nil {
		return "", err
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("want host:port, got %s", describe(v))
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return "", fmt.Errorf("want host:port with a port number from 0 to 65535, got %s", describe(v))
	}
	return s, nil
}

// AccountingPolicy is what the host does about a virtual device whose MPS
// clients use more than its cap (mps_accounting, docs/containers.md).
type AccountingPolicy string

// Accounting policies.
const (
	// AccountingOff: no accounting at all, not even NVML's listing.
	AccountingOff AccountingPolicy = "off"
	// AccountingReport: devices over their cap are reported, nobody is
	// touched.
	AccountingReport AccountingPolicy = "report"
	// AccountingEnforce: the client that pushed a device over is
	// terminated.
	AccountingEnforce AccountingPolicy = "enforce"
)

func accountingPolicy(v *yaml.Node) (AccountingPolicy, error) {
	s, err := scalarValue(v)
	if err != nil {
		return "", err
	}
	switch p := AccountingPolicy(s); p {
	case AccountingOff, AccountingReport, AccountingEnforce:
		return p, nil
	}
	return "", fmt.Errorf("%q: want off, report or enforce", s)
}

// optionalPath is an absolute path, or "" for none (mps_view_library:
// off).
func optionalPath(v *yaml.Node) (string, error) {
	if s, err := scalarValue(v); err == nil && s == "" {
		return "", nil
	}
	return absPath(v)
}

// shmPath is an absolute path, or "none" for no /dev/shm mount.
func shmPath(v *yaml.Node) (string, error) {
	if s, err := scalarValue(v); err == nil && s == "none" {
		return s, nil
	}
	return absPath(v)
}
