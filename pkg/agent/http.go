package agent

import (
	"encoding/json"

	"net/http"
	"time"
	"yunion.io/x/mps-daemon/pkg/accounting"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the agent's own series. Each Agent has its own registry: no
// global state, and tests can run several agents in one process.
type metrics struct {
	reg        *prometheus.Registry
	reconciles *prometheus.CounterVec
	duration   prometheus.Histogram
	ready      prometheus.Gauge
	gpus       prometheus.Gauge
	devices    prometheus.Gauge

	healthyGPUs      prometheus.Gauge
	reloads          *prometheus.CounterVec
	configOK         prometheus.Gauge
	configGeneration prometheus.Gauge
	controlRestarts  prometheus.Counter
	enforcementSteps *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mps_daemon_reconciles_total", Help: "Reconciles run, by result (ok or error).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "mps_daemon_reconcile_duration_seconds", Help: "How long one reconcile took.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
		ready:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "mps_daemon_ready", Help: "1 when every planned virtual device is registered with enforced caps."}),
		gpus:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "mps_daemon_gpus", Help: "GPUs the configuration shares through MPS."}),
		devices: prometheus.NewGauge(prometheus.GaugeOpts{Name: "mps_daemon_virtual_devices", Help: "Virtual devices offered in the inventory."}),
	}
	m.healthyGPUs = prometheus.NewGauge(prometheus.GaugeOpts{Name: "mps_daemon_healthy_gpus", Help: "Planned GPUs whose MPS enforces the caps with no server in FAULT."})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mps_daemon_config_reloads_total", Help: "Configuration reloads, by result (applied or rejected).",
	}, []string{"result"})
	m.configOK = prometheus.NewGauge(prometheus.GaugeOpts{Name: "mps_daemon_config_last_reload_successful", Help: "0 while the last edit of the configuration was rejected and the previous one runs."})
	m.configGeneration = prometheus.NewGauge(prometheus.GaugeOpts{Name: "mps_daemon_config_generation", Help: "How many configurations this process has taken (1 at start)."})
	m.controlRestarts = prometheus.NewCounter(prometheus.CounterOpts{Name: "mps_daemon_control_daemon_restarts_total", Help: "MPS control daemons found dead and started again."})
	m.enforcementSteps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mps_daemon_enforcement_steps_total", Help: "Steps taken against clients that pushed a virtual device over its cap, by step.",
	}, []string{"step"})
	m.reg.MustRegister(m.enforcementSteps)
	m.reg.MustRegister(m.reconciles, m.duration, m.ready, m.gpus, m.devices, m.healthyGPUs, m.reloads, m.configOK, m.configGeneration, m.controlRestarts)
	return m
}

// observeAccounting is a placeholder until the per-device series (issue 7):
// it counts enforcement steps so an operator can alert on them.
func (m *metrics) observeAccounting(r accounting.Report, _ map[string]uint64) {
	for _, s := range r.Steps {
		m.enforcementSteps.WithLabelValues(s.Step).Inc()
	}
}

func (m *metrics) observe(d time.Duration, err error) {
	m.duration.Observe(d.Seconds())
	if err != nil {
		m.reconciles.WithLabelValues("error").Inc()
		return
	}
	m.reconciles.WithLabelValues("ok").Inc()
}

// Handler serves /healthz (the process answers), /readyz (the first full
// reconcile is done and the last one succeeded), /status (what the agent last
// did, as JSON) and /metrics.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		st := a.Status()
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
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.met.reg, promhttp.HandlerOpts{}))
	return mux
}
