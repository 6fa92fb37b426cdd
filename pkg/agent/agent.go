// Package agent is the host daemon: it turns the configuration and the GPUs
// NVML reports into a plan, and the plan into MPS control daemons with
// enforced caps, the devices' entries (identity files, views, the CDI
// spec) and their records in the backend (the inventory, a Cloudpods
// region, Kubernetes); it follows configuration edits, watches MPS health
// and keeps the backend in step. A reconcile is the plan handed down a row
// of stations, each owning its state and its part of /status
// (reconcile.go). Everything it touches comes in through Options, so tests
// run it against simulated GPUs and MPS and a real inventory.
package agent

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/acctloop"
	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/entries"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/nri"
	"yunion.io/x/mps-daemon/pkg/status"
)

// DeviceBackend is where the host's virtual devices go, the one edge from
// the agent to a backend: once per reconcile the agent hands it the plan
// (backend.Offer: the GPUs, each with how it is shared, its limits and its
// devices as the CDI spec makes their entries) and takes back what it
// holds (backend.Answer: per device its holder and whether it waits to be
// removed, the claims' own devices). mps-inventory and a Cloudpods region
// are backend.Rows over their clients, Kubernetes is pkg/dra; each turns
// the offer into its own records.
type DeviceBackend interface {
	Sync(ctx context.Context, o backend.Offer) (backend.Answer, error)
}

// Mode is where the daemon's virtual devices go, chosen by the command
// that starts it: it decides what of host.conf the start reads, and so
// what Validate checks at start, in check-config and on a reload.
type Mode string

const (
	// ModeCloudpods is `mps-daemon`: the inventory host.conf chooses
	// (mps-inventory, or a Cloudpods region).
	ModeCloudpods Mode = "cloudpods"
	// ModeKubernetes is `mps-daemon kubernetes`: ResourceSlices and the
	// kubelet plugin; no inventory key of host.conf is read.
	ModeKubernetes Mode = "kubernetes"
)

// Options wires an Agent.
type Options struct {
	Config *Config
	// Mode is where the devices go; empty is ModeCloudpods.
	Mode Mode
	// ConfigPath is host.conf, read again on reloads; empty disables them.
	ConfigPath string
	Backend    gpu.Backend
	Runner     mps.Runner
	// Devices is where the virtual devices go.
	Devices DeviceBackend
	// Changed has a value when what Devices holds changed outside a
	// reconcile (a claim prepared or unprepared): the agent reconciles,
	// so its status and accounting follow. nil: never.
	Changed <-chan struct{}
	// SysfsRoot and DevRoot override host.conf's (the simulated host brings
	// its own trees); empty means host.conf's.
	SysfsRoot, DevRoot string
	// Simulated marks a host whose GPUs and MPS are simulated: said in every
	// reconcile line and in the status.
	Simulated bool
	// Notifier reaches systemd; nil sends nothing.
	Notifier Notifier
	// Watchdog is how often to send WATCHDOG=1; 0 sends none.
	Watchdog time.Duration
	// StallAfter is how long one step of the loop may run before the loop
	// counts as stalled; 0 derives it from the timeouts (loop.go).
	StallAfter time.Duration
	// Reload receives a value per SIGHUP.
	Reload <-chan struct{}
	// Killer signals clients that accounting terminates; nil is kill(2).
	Killer accounting.Killer
	// ActiveWait is how long a client caught as it connects is waited on
	// for its context before it is killed anyway; 0 is
	// accounting.ActiveWait.
	ActiveWait time.Duration
	// WatchFiles follows edits of host.conf and the device YAML (fsnotify on
	// their directories, so editors that replace the file are seen).
	WatchFiles bool
	// ClientPollInterval is how often the accounting polls the GPUs that
	// have MPS clients (pkg/acctloop); 0 is acctloop.DefaultPollInterval.
	ClientPollInterval time.Duration
	// NRI is the NRI plugin that gives Cloudpods pods their slice's edits
	// (host.conf mps_nri, pkg/nri); nil: none. Run runs it (nri.go).
	NRI *nri.Plugin
	Log *slog.Logger
}

// Agent is the running daemon: its loops (Run) and the row of stations a
// reconcile goes down (reconcile.go), each owning its state and its part
// of /status.
type Agent struct {
	opts   Options
	log    *slog.Logger
	met    *telemetry
	notify Notifier
	// The stations: MPS per GPU (gpu.go), the devices' entries and the
	// view (cdi.go, view.go), the backend's sync (inventory.go), the NRI
	// plugin's devices (nri.go), the accounting (pkg/acctloop, whose loop
	// runs beside Run's with a heartbeat of its own, acctBeat, that the
	// watchdog reads).
	mps      *mpsStation
	entries  *entriesStation
	devices  *devicesStation
	nri      *nriStation
	acct     *acctloop.Loop
	acctBeat heartbeat
	// loop-owned: only the Run loop (or a test calling Reconcile) touches
	// these, never concurrently.
	readySent bool
	// trim hands the heap's free memory back to the OS (memory.go).
	trim heapTrim
	// onReload follows a new configuration (the file watcher re-aims).
	onReload func(*Config)
	// held is a configuration change held back (guard.go).
	held *heldChange
	// beat is the Run loop's heartbeat, read by HTTP handlers and the
	// watchdog (loop.go).
	beat heartbeat
	// rootOverride are Options' SysfsRoot and DevRoot as given (the
	// simulated host's), before host.conf's fill them: a reload validates
	// the files against the roots the next start would use.
	rootOverride struct{ sys, dev string }

	mu         sync.Mutex // guards cfg, generation and status, read by HTTP handlers
	cfg        *Config
	generation int
	// status is the agent's own part of /status (the stations fill theirs).
	status status.Status
}

// New checks the options and builds an Agent; it starts nothing.
func New(opts Options) (*Agent, error) {
	if opts.Config == nil || opts.Config.Host == nil {
		return nil, errors.New("agent: no configuration")
	}
	if opts.Backend == nil || opts.Runner == nil || opts.Devices == nil {
		return nil, errors.New("agent: GPU backend, MPS runner and device backend are required")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Notifier == nil {
		opts.Notifier = noNotifier{}
	}
	if opts.Mode == "" {
		opts.Mode = ModeCloudpods
	}
	hc := opts.Config.Host
	override := struct{ sys, dev string }{opts.SysfsRoot, opts.DevRoot}
	opts.SysfsRoot, opts.DevRoot = cmp.Or(opts.SysfsRoot, hc.SysfsRoot), cmp.Or(opts.DevRoot, hc.DevRoot)
	a := &Agent{opts: opts, log: opts.Log.With("component", "agent"), notify: opts.Notifier, rootOverride: override, cfg: opts.Config, generation: 1, trim: newHeapTrim()}
	a.status.Simulated, a.status.ConfigGeneration = opts.Simulated, 1
	hostname, _ := HostName(hc) // unreadable: no Hostname label; the reconcile reports the error
	a.met = newTelemetry(hostname, a.Status)
	host := entries.ForHost(hc.StateDirectory, hc.ProcRoot)
	a.mps = &mpsStation{opts: &a.opts, log: a.log, met: a.met, modes: gpu.NewModes(hc.StateDirectory), guard: mps.NewGuard(opts.Log.With("component", "mps")),
		gpus: map[gpu.UUID]*gpuState{}}
	a.entries = &entriesStation{opts: &a.opts, log: a.log, host: host}
	a.devices = &devicesStation{opts: &a.opts, log: a.log}
	a.nri = &nriStation{plugin: opts.NRI, entries: a.entries}
	a.acct = a.newAccounting(accounting.New(accounting.Options{ProcRoot: hc.ProcRoot, Identities: host.Identity.Table, Pods: acctloop.PodFinder(hc),
		Killer: opts.Killer, ActiveWait: opts.ActiveWait, Log: opts.Log}))
	return a, nil
}

// config is the configuration in force (the last good one).
func (a *Agent) config() *Config {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg
}

// Run reconciles at once, then every sync interval, until ctx ends. One loop
// does everything: reconciles, reloads (SIGHUP or an edit), health probes
// and accounting, each step under a deadline; a watchdog beside it pings
// systemd while the loop makes progress and reports a stall (loop.go).
// A failed reconcile is retried sooner, with exponential backoff and jitter.
// MPS control daemons are left running when Run returns: their death would
// kill the CUDA clients they serve.
func (a *Agent) Run(ctx context.Context) error {
	hc := a.config().Host
	a.logConfig()
	var edits <-chan struct{}
	var w *config.Watcher
	if a.opts.WatchFiles && a.opts.ConfigPath != "" {
		var err error
		w, err = config.NewWatcher(a.log, a.watchedFiles(a.config()))
		if err != nil {
			return err
		}
		go w.Run(ctx)
		edits = w.Events()
		defer w.Close()
		a.onReload = func(cfg *Config) { w.Set(a.watchedFiles(cfg)) }
	}
	wdCtx, stopWatchdog := context.WithCancel(ctx)
	defer stopWatchdog()
	go a.watchdog(wdCtx)
	// The accounting loop (pkg/acctloop) stops with Run; a pass stuck in a
	// call that ignores its context (NVML in the kernel) is not waited for
	// longer than acctStopWait.
	acctCtx, stopAccounting := context.WithCancel(ctx)
	acctDone := make(chan struct{})
	go func() { defer close(acctDone); a.acct.Run(acctCtx) }()
	stopNRI := a.nri.run(ctx)
	defer stopNRI()
	defer func() {
		stopAccounting()
		select {
		case <-acctDone:
		case <-time.After(acctStopWait):
			a.log.Warn("accounting loop still in a pass; not waited for", "waited", acctStopWait.String())
		}
	}()
	health := time.NewTicker(hc.HealthInterval)
	defer health.Stop()
	next := time.NewTimer(0)
	defer next.Stop()
	// hold fires when a held-back configuration change is due (guard.go).
	hold := time.NewTimer(time.Hour)
	hold.Stop()
	defer hold.Stop()
	a.sendNotify("STATUS=starting: first reconcile")

	// A reconcile checks every GPU when the sync interval says so (and on
	// a retry); after an edit or a health change only the GPUs that need
	// it (gpu.go).
	failures := 0
	reconcile := func(full bool) {
		wait := a.config().Host.SyncInterval
		var err error
		a.step(ctx, "reconcile", func(ctx context.Context) { err = a.reconcile(ctx, full) })
		a.acct.Publish(a.accountInputs(), false)
		if err != nil && ctx.Err() == nil {
			failures++
			wait = backoff(failures, wait)
			a.log.Error("reconcile failed", "err", err, "retry_in", wait.Round(time.Millisecond).String())
		} else {
			failures = 0
		}
		next.Reset(wait)
	}
	reload := func(trigger string) {
		var applied bool
		a.step(ctx, "reload", func(ctx context.Context) { applied = a.reload(ctx, trigger) })
		hold.Stop()
		if due, ok := a.heldDue(); ok {
			hold.Reset(max(time.Until(due), 0))
		}
		if applied {
			reconcile(false)
		}
	}
	for {
		select {
		case <-ctx.Done():
			a.sendNotify("STOPPING=1")
			a.log.Info("stopping; MPS control daemons keep running for their clients")
			return nil
		case <-a.opts.Reload:
			if w != nil && w.Saving() {
				// The watcher reloads once the save in progress is over.
				a.log.Info("SIGHUP during an in-place save: reloading once the file is quiet")
				continue
			}
			reload("SIGHUP")
		case <-edits:
			reload("file changed")
		case <-a.opts.Changed:
			reconcile(false)
		case <-hold.C:
			reload("held change settled")
		case <-health.C:
			var changed bool
			a.step(ctx, "health probe", func(ctx context.Context) { changed = a.mps.probe(ctx) })
			if changed {
				reconcile(false)
			}
			a.acct.Publish(a.accountInputs(), true)
		case <-next.C:
			reconcile(true)
		}
		a.trim.after(time.Now())
	}
}

func (a *Agent) sendNotify(state string) {
	if err := a.notify.Notify(state); err != nil {
		a.log.Warn("notifying systemd", "err", err)
	}
}

// logConfig says once what the daemon leaves to others: host.conf keys of
// other services (debug: there are dozens) and device entries of other agents
// (one info line each).
func (a *Agent) logConfig() {
	cfg := a.config()
	if len(cfg.Host.Unknown) > 0 {
		a.log.Debug("host.conf keys left to other services", "file", cfg.Host.Path, "keys", cfg.Host.Unknown)
	}
	if cfg.Devices == nil {
		return
	}
	for _, e := range cfg.Devices.Skipped {
		a.log.Info("device entry skipped: its type belongs to another agent", "file", cfg.Devices.Path, "line", e.Line, "type", e.Type, "path", e.Path)
	}
}

// backoff is 1s doubled per consecutive failure, capped at max, with up to
// 20% jitter so that many hosts do not retry in step after an outage.
func backoff(failures int, max time.Duration) time.Duration {
	d := time.Second
	for i := 1; i < failures && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}

// Status is a copy of what the agent last did: its own part, then each
// station's.
func (a *Agent) Status() status.Status {
	a.mu.Lock()
	s := a.status
	s.RestartPending = append([]string(nil), a.status.RestartPending...)
	a.mu.Unlock()
	for _, fill := range a.stations() {
		fill(&s)
	}
	s.Loop = a.beat.status()
	if al := a.acctBeat.status(); al.Stalled && !s.Loop.Stalled {
		s.Loop = al // the accounting loop's stall
	}
	return s
}
