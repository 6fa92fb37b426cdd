package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/metrics"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/webtls"
)

// telemetry is the agent's /metrics: pkg/metrics' collector, which reads the
// agent's status at each scrape and keeps the counters, in a
// registry of the Agent's own: no global state, and tests can run several
// agents in one process.
type telemetry struct {
	reg    *prometheus.Registry
	daemon *metrics.Daemon
}

func newTelemetry(hostname string, st func() status.Status) *telemetry {
	d := metrics.NewDaemon(metrics.DaemonOptions{
		Hostname: hostname, Status: st,
		EnforcementSteps: accounting.StepNames(), EnforcementCauses: accounting.Causes(), AccountingSources: accounting.Sources(),
	})
	return &telemetry{reg: metrics.NewRegistry(d), daemon: d}
}

// observe counts one reconcile under the kind of what failed it.
func (m *telemetry) observe(d time.Duration, err error) {
	m.daemon.ObserveReconcile(d, errorKind(err))
}

// kindError marks a reconcile failure with its kind for
// mps_daemon_reconcile_errors_total; its text is the cause's.
type kindError struct {
	kind metrics.ErrorKind
	err  error
}

func (e *kindError) Error() string { return e.err.Error() }
func (e *kindError) Unwrap() error { return e.err }

// withKind marks err with kind unless something deeper already said what
// failed (listing the GPUs inside planning is gpu, not config).
func withKind(kind metrics.ErrorKind, err error) error {
	var ke *kindError
	if err == nil || errors.As(err, &ke) {
		return err
	}
	return &kindError{kind: kind, err: err}
}

// errorKind is the kind err was marked with; an unmarked failure counts as
// mps, the reconcile's own work. nil is no failure.
func errorKind(err error) metrics.ErrorKind {
	if err == nil {
		return ""
	}
	var ke *kindError
	if errors.As(err, &ke) {
		return ke.kind
	}
	return metrics.ErrorMPS
}

// Handler serves /healthz (the process answers and its main loop is not
// stalled), /readyz (that, and the first full reconcile is done and the
// last one succeeded), /status (what the agent last did, as JSON) and
// /metrics.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if msg := a.Status().Loop.StallMessage(time.Now()); msg != "" {
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		st := a.Status()
		if msg := st.Loop.StallMessage(time.Now()); msg != "" {
			http.Error(w, "not ready: "+msg, http.StatusServiceUnavailable)
			return
		}
		if !st.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
			msg := "not ready"
			if st.LastError != "" {
				msg += ": " + st.LastError
			}
			_, _ = w.Write([]byte(msg + "\n"))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(a.Status())
	})
	mux.Handle("GET /metrics", metrics.Handler(a.met.reg))
	return mux
}

// serveHTTP serves Handler on addr (mps_listen_address; "" serves
// nothing) as the web configuration file webConfig says
// (mps_web_config_file, pkg/webtls: TLS, client certificates, basic auth;
// "" plain HTTP). The file is checked before anything listens; the
// toolkit reads it again at each connection and request, so a renewed
// certificate or a changed password needs no restart. A listener beyond
// loopback without TLS is one warning saying what it shows.
func (a *Agent) serveHTTP(ctx context.Context, addr, webConfig string) (<-chan error, func(), error) {
	if addr == "" {
		return nil, func() {}, nil
	}
	wc, err := webtls.LoadWebConfig(webConfig)
	if err != nil {
		return nil, nil, fmt.Errorf("mps_web_config_file: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listening on mps_listen_address %s: %w", addr, err)
	}
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 1)
	go func() { errc <- webtls.Serve(ln, srv, wc, a.log) }()
	a.log.Info("serving health and metrics", append([]any{"address", ln.Addr().String()}, wc.Attrs()...)...)
	if wc.InClear(ln.Addr()) {
		a.log.Warn("serving /metrics and /status in plain HTTP beyond loopback: anyone on the network reads the GPUs, the virtual devices and the guests holding them (and basic auth's passwords, if set); give mps_web_config_file with tls_server_config (docs/monitoring.md)",
			"address", ln.Addr().String())
	}
	return errc, func() {
		shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutCtx)
	}, nil
}
