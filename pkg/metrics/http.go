package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// HTTP counts and times a server's requests by route, method and status
// code. The route is the ServeMux pattern that served the request, never
// its path, so ids in paths do not become label values; the caller passes
// RouteUnmatched for a request no pattern of its own matched.
type HTTP struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inFlight prometheus.Gauge
}

// RouteUnmatched is the route label of requests that matched no route.
const RouteUnmatched = "unmatched"

// InventoryPrefix names the inventory's series: mps_inventory_http_*.
const InventoryPrefix = "mps_inventory"

// httpLabels are the labels of the request series.
var httpLabels = []string{"route", "method", "code"}

// NewHTTP builds the series <prefix>_http_requests_total,
// <prefix>_http_request_duration_seconds and
// <prefix>_http_requests_in_flight, e.g. with prefix "mps_inventory".
func NewHTTP(prefix string) *HTTP {
	return &HTTP{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "_http_requests_total", Help: "HTTP requests answered, by route (the pattern, not the path), method and status code.",
		}, httpLabels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: prefix + "_http_request_duration_seconds", Help: "How long answering an HTTP request took, by route, method and status code.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, httpLabels),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: prefix + "_http_requests_in_flight", Help: "HTTP requests being answered.",
		}),
	}
}

// Start marks a request in flight; call the function it returns when the
// request is answered.
func (h *HTTP) Start() (done func()) {
	h.inFlight.Inc()
	return h.inFlight.Dec
}

// Observe counts one answered request.
func (h *HTTP) Observe(route, method string, code int, took time.Duration) {
	l := []string{route, Method(method), strconv.Itoa(code)}
	h.requests.WithLabelValues(l...).Inc()
	h.duration.WithLabelValues(l...).Observe(took.Seconds())
}

// Describe implements prometheus.Collector.
func (h *HTTP) Describe(ch chan<- *prometheus.Desc) {
	h.requests.Describe(ch)
	h.duration.Describe(ch)
	h.inFlight.Describe(ch)
}

// Collect implements prometheus.Collector.
func (h *HTTP) Collect(ch chan<- prometheus.Metric) {
	h.requests.Collect(ch)
	h.duration.Collect(ch)
	h.inFlight.Collect(ch)
}

// Method is the method label of a request: the standard methods as they
// are, anything else (a client may send any token) as OTHER, so a client
// cannot create series at will.
func Method(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "OTHER"
}
