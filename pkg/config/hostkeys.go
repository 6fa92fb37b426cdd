package config

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// hostKey is one host.conf key of ours, declared once: the set of keys we
// read, how a value is read into its HostConf field, and whether a running
// daemon takes a change of it or keeps the value it started with
// (KeepRestartOnly) are all this table. Adding a key is one line here and
// its field in HostConf (and, for a restart-only key, nothing else).
type hostKey struct {
	name string
	// read stores the value in hc, or says what is wrong with it.
	read func(hc *HostConf, v *yaml.Node) error
	// keep, for a key only a restart applies (where MPS lives, what the
	// daemon listens on, whom it talks to), puts cur's value back into
	// next and reports whether the file had changed it; nil for a key a
	// reload applies.
	keep func(cur, next *HostConf) bool
}

// restart and reload say which of the two a key is.
const (
	reload  = false
	restart = true
)

// key declares a key whose value parse reads into field.
func key[T comparable](name string, field func(*HostConf) *T, parse func(v *yaml.Node) (T, error), restartOnly bool) hostKey {
	k := hostKey{name: name, read: func(hc *HostConf, v *yaml.Node) (err error) {
		*field(hc), err = parse(v)
		return err
	}}
	if restartOnly {
		k.keep = func(cur, next *HostConf) bool { return keeper(field(cur), field(next)) }
	}
	return k
}

// keeper puts cur's value back into next and reports whether it differed.
func keeper[T comparable](cur, next *T) bool {
	if *cur == *next {
		return false
	}
	*next = *cur
	return true
}

// duration reads a bounded duration of key name (bounds.go).
func duration(name string) func(v *yaml.Node) (time.Duration, error) {
	return func(v *yaml.Node) (time.Duration, error) { return boundedDuration(name, v) }
}

// oneOfValues reads one of choices (oneOf).
func oneOfValues(choices ...string) func(v *yaml.Node) (string, error) {
	return func(v *yaml.Node) (string, error) { return oneOf(v, choices...) }
}

// hostKeys are the keys this daemon reads: Cloudpods' own MPS keys (the
// first five, Cloudpods' defaults), ours (mps_*), and ours for living in a
// Cloudpods cloud (cloudpods.go). Anything else in host.conf is
// Cloudpods' (its keys this daemon also reads are cloudpodsAliases').
var hostKeys = []hostKey{
	key("enable_cuda_mps", func(h *HostConf) *bool { return &h.EnableCudaMPS }, boolValue, reload),
	key("container_device_config_file", func(h *HostConf) *string { return &h.ContainerDeviceConfigFile }, scalarValue, reload),
	key("cuda_mps_pipe_directory", func(h *HostConf) *string { return &h.CudaMPSPipeDirectory }, absPath, restart),
	key("cuda_mps_log_directory", func(h *HostConf) *string { return &h.CudaMPSLogDirectory }, absPath, restart),
	key("cuda_mps_replicas", func(h *HostConf) *int { return &h.CudaMPSReplicas }, virtualNumber, reload),
	key("mps_state_directory", func(h *HostConf) *string { return &h.StateDirectory }, absPath, restart),
	key("mps_listen_address", func(h *HostConf) *string { return &h.ListenAddress }, hostPort, restart),
	key("mps_inventory_url", func(h *HostConf) *string { return &h.InventoryURL }, httpURL, restart),
	key("mps_inventory_token", func(h *HostConf) *string { return &h.InventoryToken }, scalarValue, restart),
	key("mps_inventory_token_file", func(h *HostConf) *string { return &h.InventoryTokenFile }, scalarValue, restart),
	// TLS (docs/operations.md, "TLS"): the keys are wired at start, the
	// files they name read again at each connection, so a renewed
	// certificate or CA bundle needs no restart.
	key("mps_inventory_ca_file", func(h *HostConf) *string { return &h.InventoryCAFile }, optionalPath, restart),
	key("mps_inventory_cert_file", func(h *HostConf) *string { return &h.InventoryCertFile }, optionalPath, restart),
	key("mps_inventory_key_file", func(h *HostConf) *string { return &h.InventoryKeyFile }, optionalPath, restart),
	key("mps_web_config_file", func(h *HostConf) *string { return &h.WebConfigFile }, optionalPath, restart),
	key("mps_control_binary", func(h *HostConf) *string { return &h.ControlBinary }, nonEmpty, restart),
	key("mps_host_name", func(h *HostConf) *string { return &h.HostName }, hostName, restart),
	key("mps_sysfs_root", func(h *HostConf) *string { return &h.SysfsRoot }, absPath, restart),
	key("mps_dev_root", func(h *HostConf) *string { return &h.DevRoot }, absPath, restart),
	key("mps_cdi_directory", func(h *HostConf) *string { return &h.CDIDirectory }, absPath, restart),
	key("mps_proc_root", func(h *HostConf) *string { return &h.ProcRoot }, absPath, restart),
	key("mps_multiuser_server", func(h *HostConf) *bool { return &h.MultiUserServer }, boolValue, restart),
	key("mps_control_timeout", func(h *HostConf) *time.Duration { return &h.ControlTimeout }, duration("mps_control_timeout"), restart),
	key("mps_health_interval", func(h *HostConf) *time.Duration { return &h.HealthInterval }, duration("mps_health_interval"), restart),
	key("mps_inventory_timeout", func(h *HostConf) *time.Duration { return &h.InventoryTimeout }, duration("mps_inventory_timeout"), restart),
	// The backend is wired at start: which region or inventory, and how
	// MPS's sockets are laid out, stay as they were until a restart.
	key("mps_inventory_backend", func(h *HostConf) *string { return &h.InventoryBackend }, oneOfValues(BackendAuto, BackendInventory, BackendRegion), restart),
	key("mps_pipe_layout", func(h *HostConf) *string { return &h.PipeLayout }, oneOfValues(LayoutAuto, LayoutPerGPU, LayoutSingle), restart),
	key("mps_region_device_model", func(h *HostConf) *string { return &h.RegionDeviceModel }, oneOfValues(DeviceModelAuto, DeviceModelGPU, DeviceModelPerSlice), restart),
	key("mps_region_host_mac", func(h *HostConf) *string { return &h.RegionHostMAC }, macAddress, restart),
	key("mps_region_create_host", func(h *HostConf) *bool { return &h.RegionCreateHost }, boolValue, restart),
	key("mps_region_insecure_tls", func(h *HostConf) *bool { return &h.RegionInsecureTLS }, boolValue, restart),
	key("mps_set_exclusive_compute_mode", func(h *HostConf) *bool { return &h.SetExclusiveComputeMode }, boolValue, reload),
	key("mps_sync_interval", func(h *HostConf) *time.Duration { return &h.SyncInterval }, duration("mps_sync_interval"), reload),
	key("mps_cdi_shm_path", func(h *HostConf) *string { return &h.CDIShmPath }, shmPath, reload),
	key("mps_accounting", func(h *HostConf) *AccountingPolicy { return &h.Accounting }, accountingPolicy, reload),
	key("mps_thread_percentage", func(h *HostConf) *ThreadPolicy { return &h.Threads }, threadPolicy, reload),
	key("mps_reload_hold_time", func(h *HostConf) *time.Duration { return &h.ReloadHoldTime }, duration("mps_reload_hold_time"), reload),
	key("mps_view_library", func(h *HostConf) *string { return &h.ViewLibrary }, optionalPath, reload),
	// Cloudpods' own pods (issue 45): read by the accounting and the NRI
	// plugin, both wired at start.
	key("mps_pod_cgroup_parent", func(h *HostConf) *string { return &h.PodCgroupParent }, optionalPath, restart),
	key("mps_containerd_state_directory", func(h *HostConf) *string { return &h.ContainerdStateDirectory }, absPath, restart),
	key("servers_path", func(h *HostConf) *string { return &h.ServersPath }, absPath, restart),
	key("mps_nri", func(h *HostConf) *bool { return &h.NRI }, boolValue, restart),
	key("mps_nri_socket", func(h *HostConf) *string { return &h.NRISocket }, absPath, restart),
}

// hostKeyByName is hostKeys by name.
var hostKeyByName = func() map[string]hostKey {
	m := make(map[string]hostKey, len(hostKeys))
	for _, k := range hostKeys {
		if _, dup := m[k.name]; dup {
			panic(fmt.Sprintf("config: host.conf key %s declared twice", k.name))
		}
		m[k.name] = k
	}
	return m
}()

// KeepRestartOnly copies into next the values of cur that a running daemon
// cannot change under its feet (the keys hostKeys declares restart-only,
// and Cloudpods' own keys, whose region the backend was wired to), and
// names those next had changed: they apply at the next start.
func KeepRestartOnly(cur, next *HostConf) []string {
	var kept []string
	for _, k := range hostKeys {
		if k.keep != nil && k.keep(cur, next) {
			kept = append(kept, k.name)
		}
	}
	if keeper(&cur.Cloudpods, &next.Cloudpods) {
		kept = append(kept, "auth_url and Cloudpods' admin keys")
	}
	return kept
}
