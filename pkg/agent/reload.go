package agent

import (
	"context"
	"strings"

	"yunion.io/x/mps-daemon/pkg/config"
)

// reload reads host.conf and the device YAML again and, when both are valid
// for the GPUs present, makes them the configuration in force. A bad edit
// changes nothing: the last good configuration keeps running, and the error
// (file and line) goes to the log, the systemd status, /status and a metric.
// It reports whether a new configuration was taken.
func (a *Agent) reload(ctx context.Context, trigger string) bool {
	if a.opts.ConfigPath == "" {
		return false
	}
	a.sendNotify(reloadingState())
	defer func() {
		if a.readySent {
			a.sendNotify("READY=1")
		}
	}()
	cfg, err := LoadConfig(a.opts.ConfigPath)
	if err == nil {
		_, err = a.plan(ctx, cfg)
	}
	if err != nil {
		a.met.daemon.ObserveReload(false)
		a.mu.Lock()
		a.status.ConfigError = err.Error()
		a.mu.Unlock()
		a.log.Error("configuration rejected; the last good one stays in force", "trigger", trigger, "err", err)
		a.sendNotify("STATUS=" + a.statusLine())
		return false
	}
	old := a.config()
	if kept := keepRestartOnly(old.Host, cfg.Host); len(kept) > 0 {
		a.log.Warn("these host.conf changes take effect at the next restart", "keys", strings.Join(kept, ","))
	}
	a.mu.Lock()
	a.cfg = cfg
	a.generation++
	gen := a.generation
	a.status.ConfigGeneration = gen
	a.status.ConfigError = ""
	a.mu.Unlock()
	a.met.daemon.ObserveReload(true)
	a.log.Info("configuration reloaded", "trigger", trigger, "generation", gen)
	a.logConfig()
	if a.onReload != nil {
		a.onReload(cfg)
	}
	return true
}

// keepRestartOnly copies into next the keys that a running daemon cannot
// change under its feet (where MPS lives, what it listens on, whom it talks
// to), and names the ones the operator changed. They apply at the next start.
func keepRestartOnly(cur, next *config.HostConf) []string {
	var kept []string
	keep := func(key string, c, n *string) {
		if *c != *n {
			kept = append(kept, key)
			*n = *c
		}
	}
	keep("cuda_mps_pipe_directory", &cur.CudaMPSPipeDirectory, &next.CudaMPSPipeDirectory)
	keep("cuda_mps_log_directory", &cur.CudaMPSLogDirectory, &next.CudaMPSLogDirectory)
	keep("mps_state_directory", &cur.StateDirectory, &next.StateDirectory)
	keep("mps_listen_address", &cur.ListenAddress, &next.ListenAddress)
	keep("mps_inventory_url", &cur.InventoryURL, &next.InventoryURL)
	keep("mps_inventory_token", &cur.InventoryToken, &next.InventoryToken)
	keep("mps_inventory_token_file", &cur.InventoryTokenFile, &next.InventoryTokenFile)
	keep("mps_control_binary", &cur.ControlBinary, &next.ControlBinary)
	keep("mps_host_name", &cur.HostName, &next.HostName)
	keep("mps_sysfs_root", &cur.SysfsRoot, &next.SysfsRoot)
	keep("mps_dev_root", &cur.DevRoot, &next.DevRoot)
	keep("mps_cdi_directory", &cur.CDIDirectory, &next.CDIDirectory)
	keep("mps_proc_root", &cur.ProcRoot, &next.ProcRoot)
	if cur.MultiUserServer != next.MultiUserServer {
		kept = append(kept, "mps_multiuser_server")
		next.MultiUserServer = cur.MultiUserServer
	}
	if cur.ControlTimeout != next.ControlTimeout {
		kept = append(kept, "mps_control_timeout")
		next.ControlTimeout = cur.ControlTimeout
	}
	if cur.HealthInterval != next.HealthInterval {
		kept = append(kept, "mps_health_interval")
		next.HealthInterval = cur.HealthInterval
	}
	return kept
}

// watchedFiles are the files whose edits trigger a reload.
func (a *Agent) watchedFiles(cfg *Config) []string {
	files := []string{a.opts.ConfigPath}
	if cfg.Host.ContainerDeviceConfigFile != "" {
		files = append(files, cfg.Host.ContainerDeviceConfigFile)
	}
	return files
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
