package agent

import (
	"context"
	"slices"
	"strings"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/plan"
	"yunion.io/x/mps-daemon/pkg/systemd"
)

// reload reads host.conf and the device YAML again and, when both pass the
// checks of the start and check-config (Validate, restart-only keys
// included), makes them the configuration in force. A bad edit changes
// nothing: the last good configuration keeps running, and the error
// (file and line) goes to the log, the systemd status, /status and a metric.
// The same bytes as the configuration in force change nothing either, and a
// change that would take every device away or drop the YAML's entries is
// held back until the files settle (guard.go). It reports whether a new
// configuration was taken.
func (a *Agent) reload(ctx context.Context, trigger string) bool {
	if a.opts.ConfigPath == "" {
		return false
	}
	a.sendNotify(systemd.Reloading())
	defer func() {
		if a.readySent {
			a.sendNotify("READY=1")
		}
	}()
	old := a.config()
	cfg, err := LoadConfig(a.opts.ConfigPath)
	if err == nil {
		// The files as the next start would read them, restart-only keys
		// included: a reload that arms a failing restart is refused.
		_, _, err = Validate(ctx, cfg, a.opts.Mode, a.opts.Backend, a.rootOverride.sys, a.rootOverride.dev)
	}
	var risk string
	if err == nil {
		a.noteRestartOnly(keepRestartOnly(old.Host, cfg.Host))
		risk, err = a.assess(ctx, old, cfg)
	}
	if err != nil {
		a.releaseHeld()
		a.met.daemon.ObserveReload(false)
		a.mu.Lock()
		a.status.ConfigError = err.Error()
		a.mu.Unlock()
		a.log.Error("configuration rejected; the last good one stays in force", "trigger", trigger, "err", err)
		a.sendNotify("STATUS=" + a.statusLine())
		return false
	}
	if cfg.digest != "" && cfg.digest == old.digest {
		a.releaseHeld()
		a.mu.Lock()
		hadError := a.status.ConfigError != ""
		a.status.ConfigError = ""
		a.mu.Unlock()
		a.log.Debug("configuration files unchanged; nothing to apply", "trigger", trigger)
		if hadError {
			a.log.Info("configuration files are back to the configuration in force", "trigger", trigger)
			a.sendNotify("STATUS=" + a.statusLine())
		}
		return false
	}
	if risk != "" && a.holdOrRelease(cfg.digest, risk, old.Host.ReloadHoldTime) {
		return false
	}
	a.releaseHeld()
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

// assess checks next against the GPUs present, the way a reconcile would,
// and says whether going to it from cur is a change to hold back.
func (a *Agent) assess(ctx context.Context, cur, next *Config) (risk string, err error) {
	np, gpus, err := a.plan(ctx, next)
	if err != nil {
		return "", err
	}
	cp, _ := planFor(cur, gpus, a.opts.SysfsRoot, a.opts.DevRoot) // the part in force that still fits
	return plan.Risk(cp, np), nil
}

// noteRestartOnly shows the restart-only keys changed on disk: a warning
// when the set changes, and /status' restart_pending while it is not empty.
func (a *Agent) noteRestartOnly(kept []string) {
	a.mu.Lock()
	changed := !slices.Equal(a.status.RestartPending, kept)
	a.status.RestartPending = kept
	a.mu.Unlock()
	if changed && len(kept) > 0 {
		a.log.Warn("these host.conf changes take effect at the next restart; until then the running values stay", "keys", strings.Join(kept, ","))
	}
}

// keepRestartOnly copies into next the keys that a running daemon cannot
// change under its feet (config.KeepRestartOnly: where MPS lives, what it
// listens on, whom it talks to), and names the ones the operator changed.
// They apply at the next start.
func keepRestartOnly(cur, next *config.HostConf) []string { return config.KeepRestartOnly(cur, next) }

// watchedFiles are the files whose edits trigger a reload.
func (a *Agent) watchedFiles(cfg *Config) []string {
	files := []string{a.opts.ConfigPath}
	if cfg.Host.ContainerDeviceConfigFile != "" {
		files = append(files, cfg.Host.ContainerDeviceConfigFile)
	}
	return files
}
