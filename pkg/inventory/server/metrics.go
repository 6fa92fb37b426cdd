package server

import (
	"net/http"
	"strings"

	"yunion.io/x/mps-daemon/pkg/metrics"
)

// Metrics: GET /metrics serves the process's own registry (request counts
// and latencies by route, method and status, the Go runtime's and the
// process's series). It is an API route like the others: it needs a bearer
// token, of any role (routePolicy), so Prometheus scrapes with a viewer
// token (packaging/prometheus/scrape.yml). Only /healthz and /readyz stay
// open, as before.

// routeOf names the route that serves r for the request series: the
// ServeMux pattern without its method ("/isolated_devices/{id}"), never the
// path, so ids and typos do not become label values. Patterns are only
// taken from the known set: a mux answers Handler with the cleaned path for
// a redirect, which a client controls.
type routeOf func(r *http.Request) string

func newRouteOf(root, api *http.ServeMux, known map[string]bool) routeOf {
	return func(r *http.Request) string {
		_, p := root.Handler(r)
		if p == "/" || !known[p] {
			_, p = api.Handler(r)
		}
		if p == "/" || !known[p] {
			return metrics.RouteUnmatched
		}
		if _, path, ok := strings.Cut(p, " "); ok {
			return path
		}
		return p
	}
}

func (s *server) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	s.metrics.ServeHTTP(w, r)
	return nil
}
