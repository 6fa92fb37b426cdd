// Package agent is the host daemon: it turns the configuration and the GPUs
// NVML reports into MPS control daemons with enforced caps, and those into
// virtual devices in the inventory. Everything it touches comes in through
// Options, so tests run it against simulated GPUs and MPS and a real
// inventory.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/inventory/client"
	"yunion.io/x/mps-daemon/pkg/mps"
)

// Inventory is what the agent needs of the inventory.
type Inventory interface {
	EnsureHost(ctx context.Context, name string) (api.Host, error)
	SyncDevices(ctx context.Context, hostID string, desired []api.IsolatedDevice) (client.SyncResult, error)
}

// Options wires an Agent.
type Options struct {
	Config    *Config
	Backend   gpu.Backend
	Runner    mps.Runner
	Inventory Inventory
	// SysfsRoot and DevRoot override host.conf's (the simulated host brings
	// its own trees); empty means host.conf's.
	SysfsRoot, DevRoot string
	// Simulated marks a host whose GPUs and MPS are simulated: said in every
	// reconcile line and in the status.
	Simulated bool
	Log       *slog.Logger
}

// Agent is the running daemon.
type Agent struct {
	opts   Options
	log    *slog.Logger
	state  *stateDir
	met    *metrics
	hostID string

	mu          sync.Mutex
	controllers map[string]*mps.Controller // by GPU UUID
	status      Status
}

// New checks the options and builds an Agent; it starts nothing.
func New(opts Options) (*Agent, error) {
	if opts.Config == nil || opts.Config.Host == nil {
		return nil, errors.New("agent: no configuration")
	}
	if opts.Backend == nil || opts.Runner == nil || opts.Inventory == nil {
		return nil, errors.New("agent: backend, MPS runner and inventory are required")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	hc := opts.Config.Host
	if opts.SysfsRoot == "" {
		opts.SysfsRoot = hc.SysfsRoot
	}
	if opts.DevRoot == "" {
		opts.DevRoot = hc.DevRoot
	}
	a := &Agent{
		opts:        opts,
		log:         opts.Log.With("component", "agent"),
		state:       &stateDir{path: hc.StateDirectory},
		met:         newMetrics(),
		controllers: map[string]*mps.Controller{},
	}
	a.status.Simulated = opts.Simulated
	return a, nil
}

// Run reconciles at once, then every sync interval, until ctx ends. A failed
// reconcile is retried sooner, with exponential backoff and jitter. The
// health and metrics endpoints are served on the configured address. MPS
// control daemons are left running when Run returns: their death would kill
// the CUDA clients they serve.
func (a *Agent) Run(ctx context.Context) error {
	hc := a.opts.Config.Host
	a.logConfig()
	var srvErr chan error
	if hc.ListenAddress != "" {
		ln, err := net.Listen("tcp", hc.ListenAddress)
		if err != nil {
			return fmt.Errorf("listening on mps_listen_address %s: %w", hc.ListenAddress, err)
		}
		srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, IdleTimeout: time.Minute}
		srvErr = make(chan error, 1)
		go func() { srvErr <- srv.Serve(ln) }()
		defer func() {
			shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shutCtx)
		}()
		a.log.Info("serving health and metrics", "address", ln.Addr().String())
	}
	failures := 0
	for {
		wait := hc.SyncInterval
		if err := a.Reconcile(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			failures++
			wait = backoff(failures, hc.SyncInterval)
			a.log.Error("reconcile failed", "err", err, "retry_in", wait.Round(time.Millisecond).String())
		} else {
			failures = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			a.log.Info("stopping; MPS control daemons keep running for their clients")
			return nil
		case err := <-srvErr:
			t.Stop()
			return fmt.Errorf("health and metrics server: %w", err)
		case <-t.C:
		}
	}
}

// logConfig says once what the daemon leaves to others: host.conf keys of
// other services (debug: there are dozens) and device entries of other agents
// (one info line each).
func (a *Agent) logConfig() {
	cfg := a.opts.Config
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

// Status is a copy of what the agent last did.
func (a *Agent) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.status
	s.GPUs = append([]GPUStatus(nil), a.status.GPUs...)
	return s
}
