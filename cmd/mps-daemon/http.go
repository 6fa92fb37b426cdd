package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"yunion.io/x/mps-daemon/pkg/agent"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/webtls"
)

// serveHTTP serves the agent's Handler on mps_listen_address ("" serves
// nothing) as mps_web_config_file says (host.conf's listener,
// pkg/webtls: TLS, client certificates, basic auth; "" plain HTTP). The
// file is checked before anything listens; the toolkit reads it again at
// each connection and request, so a renewed certificate or a changed
// password needs no restart. It returns the server's failure and how to
// stop it.
func serveHTTP(ctx context.Context, hc *config.HostConf, a *agent.Agent, log *slog.Logger) (<-chan error, func(), error) {
	if hc.ListenAddress == "" {
		return nil, func() {}, nil
	}
	l := hc.Listener()
	wc, err := l.Check()
	if err != nil {
		return nil, nil, err
	}
	ln, err := l.Listen(wc, log)
	if err != nil {
		return nil, nil, err
	}
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 1)
	go func() { errc <- webtls.Serve(ln, srv, wc, log) }()
	log.Info("serving health and metrics", append([]any{"address", ln.Addr().String()}, wc.Attrs()...)...)
	return errc, func() {
		shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutCtx)
	}, nil
}

// runServing runs the agent until ctx ends, its health and metrics
// server beside it (serveHTTP): a failure of the server stops the agent
// and is the error returned.
func runServing(ctx context.Context, a *agent.Agent, hc *config.HostConf, log *slog.Logger) error {
	served, stopHTTP, err := serveHTTP(ctx, hc, a, log)
	if err != nil {
		return err
	}
	defer stopHTTP()
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go func() {
		select {
		case err := <-served:
			stop(fmt.Errorf("health and metrics server: %w", err))
		case <-runCtx.Done():
		}
	}()
	if err := a.Run(runCtx); err != nil {
		return err
	}
	if ctx.Err() == nil {
		return context.Cause(runCtx) // the server failed
	}
	return nil
}
