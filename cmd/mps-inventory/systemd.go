package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"yunion.io/x/mps-daemon/pkg/inventory/server"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
	"yunion.io/x/mps-daemon/pkg/loopback"
	"yunion.io/x/mps-daemon/pkg/systemd"
	"yunion.io/x/mps-daemon/pkg/webtls"
)

// The systemd side of `mps-inventory serve` (yunion-mps-inventory.service is
// Type=notify with WatchdogSec= and ExecReload=): READY=1 is sent by serve,
// WATCHDOG=1 by watchdog while the API answers, and a reload (SIGHUP) runs
// reload, framed by RELOADING=1 and READY=1.

// notifyFunc sends one sd_notify state; systemd.Notify in production, a
// recorder in tests.
type notifyFunc func(state string) error

// probeURL is the /healthz URL of the server listening on addr, reached over
// loopback when it listens on every address.
func probeURL(addr net.Addr, scheme string) string {
	dial, err := loopback.Address(addr.String())
	if err != nil {
		dial = addr.String()
	}
	return scheme + "://" + dial + "/healthz"
}

// prober asks the API whether it answers: GET /healthz, 200. Behind a web
// configuration that asks every client for a password or a certificate,
// which the probe has not, the toolkit's refusal is the answer: a 401
// (basic_auth_users), or a handshake that demands a certificate
// (client_auth_type Require*); either comes from the process serving the
// API, through the same listener and handshake.
type prober struct {
	url    string
	client *http.Client
	wc     webtls.WebConfig
}

func newProber(addr net.Addr, wc webtls.WebConfig, timeout time.Duration) prober {
	c := probeClient(wc)
	c.Timeout = timeout
	return prober{url: probeURL(addr, wc.Scheme()), client: c, wc: wc}
}

// watchdog sends WATCHDOG=1 on every tick on which the API answers the
// probe, so systemd restarts a server whose API no longer answers.
// /healthz does not touch the database: a PostgreSQL outage must not turn
// into restarts that cannot help (/readyz reports it). It returns when ctx
// ends.
func watchdog(ctx context.Context, p prober, ticks <-chan time.Time, notify notifyFunc, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		if err := p.probe(ctx); err != nil {
			log.Warn("the API does not answer: no watchdog ping", "url", p.url, "error", err)
			continue
		}
		if err := notify("WATCHDOG=1"); err != nil {
			log.Warn("watchdog ping", "error", err)
		}
	}
}

func (p prober) probe(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return fmt.Errorf("probing %s: %w", p.url, err)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		if r := webtls.Refusal(err, ""); r != nil && p.wc.RequiresClientCertificate() && r.ClientCertificate {
			return nil
		}
		return fmt.Errorf("probing %s: %w", p.url, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode == http.StatusUnauthorized && p.wc.Users > 0 {
		return nil
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probing %s: status %d", p.url, resp.StatusCode)
	}
	return nil
}

// reloader runs reload for every signal on sigs (SIGHUP) until ctx ends:
// RELOADING=1, reload, READY=1 (with a STATUS= naming a failure, which leaves
// the server running as it was). Signals that arrive during a reload
// collapse into one (sigs holds one).
func reloader(ctx context.Context, sigs <-chan os.Signal, reload func(context.Context) error, notify notifyFunc, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-sigs:
		}
		_ = notify(systemd.Reloading())
		status := "STATUS=serving"
		if err := reload(ctx); err != nil {
			log.Error("reload", "error", err)
			status = "STATUS=serving; last reload failed: " + err.Error()
		} else {
			log.Info("reloaded")
		}
		if err := notify("READY=1\n" + status); err != nil {
			log.Warn("sd_notify", "error", err)
		}
	}
}

// superviseWithSystemd runs what systemd asks of the service: systemctl
// reload (SIGHUP) writes the admin token file again when it was deleted or
// its token revoked; WATCHDOG=1 while the API answers; READY=1 once the admin
// token file is written and the API answers, so a daemon ordered after this
// unit finds both. The returned stop ends both before the database closes.
// SIGHUP is caught before READY=1 (Go's default for it is to exit).
func superviseWithSystemd(ctx context.Context, st *store.Store, adminTokenFile string, addr net.Addr, wc webtls.WebConfig, log *slog.Logger) (stop func()) {
	bg, stopBG := context.WithCancel(ctx)
	var wg sync.WaitGroup
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	wg.Go(func() {
		reloader(bg, hup, func(ctx context.Context) error {
			return server.EnsureAdminTokenFile(ctx, st, adminTokenFile, log.With("component", "auth"))
		}, systemd.Notify, log)
	})
	interval, err := systemd.WatchdogInterval()
	if err != nil {
		log.Warn("watchdog", "error", err)
	}
	var tick *time.Ticker
	if interval > 0 {
		tick = time.NewTicker(interval)
		wg.Go(func() { watchdog(bg, newProber(addr, wc, interval), tick.C, systemd.Notify, log) })
	}
	if err := systemd.Notify(systemd.Ready); err != nil {
		log.Warn("sd_notify", "error", err)
	}
	return func() {
		stopBG()
		signal.Stop(hup)
		wg.Wait()
		if tick != nil {
			tick.Stop()
		}
	}
}
