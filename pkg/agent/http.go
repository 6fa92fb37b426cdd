package agent

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/metrics"
	"yunion.io/x/mps-daemon/pkg/status"
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
// /metrics; cmd/mps-daemon serves it on host.conf's listener
// (config.HostConf.Listener) beside Run.
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
