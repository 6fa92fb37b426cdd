// Package server is the inventory's REST API: Cloudpods' `hosts` and
// `isolated_devices` resources with the same paths, JSON envelopes, field
// names and error bodies, so climc and scripts written for Cloudpods work
// against it. Storage is pkg/inventory/store.
package server

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
	"yunion.io/x/mps-daemon/pkg/metrics"
)

// Options configures the API. There is no way to turn authentication off:
// every call but /healthz and /readyz needs a bearer token of the store's
// token table (see auth.go and auth_policy.go).
type Options struct {
	// MaxBodyBytes bounds request bodies; 0 means 1 MiB.
	MaxBodyBytes int64
}

const (
	defaultMaxBody = 1 << 20
	// readyTimeout bounds the database ping of /readyz.
	readyTimeout = 2 * time.Second
)

type server struct {
	st      *store.Store
	log     *slog.Logger
	maxBody int64
	// policy is routePolicy(): who may call each route.
	policy map[string]access
	// requests counts and times requests by route (metrics.go), served
	// with the Go and process series at GET /metrics.
	requests *metrics.HTTP
	metrics  http.Handler
	route    routeOf
}

// New returns the API's handler over st.
func New(st *store.Store, opts Options, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &server{st: st, log: log, maxBody: opts.MaxBodyBytes, policy: routePolicy(), requests: metrics.NewHTTP(metrics.InventoryPrefix)}
	s.metrics = metrics.Handler(metrics.NewRegistry(s.requests))
	if s.maxBody <= 0 {
		s.maxBody = defaultMaxBody
	}

	apiMux := http.NewServeMux()
	routes := map[string]handlerFunc{
		"GET /hosts":                        s.listHosts,
		"POST /hosts":                       s.createHost,
		"GET /hosts/{id}":                   s.getHost,
		"PUT /hosts/{id}":                   s.updateHost,
		"DELETE /hosts/{id}":                s.deleteHost,
		"GET /isolated_devices":             s.listDevices,
		"POST /isolated_devices":            s.createDevice,
		"GET /isolated_devices/{id}":        s.getDevice,
		"PUT /isolated_devices/{id}":        s.updateDevice,
		"DELETE /isolated_devices/{id}":     s.deleteDevice,
		"POST /isolated_devices/{id}/purge": s.purgeDevice,
		"GET /metrics":                      s.serveMetrics,
		"/":                                 s.noRoute,
	}
	s.addAllocRoutes(routes) // attach, detach: alloc.go
	known := map[string]bool{"GET /healthz": true, "GET /readyz": true}
	for pattern, h := range routes {
		apiMux.Handle(pattern, s.handle(s.authorize(pattern, h)))
		known[pattern] = true
	}

	root := http.NewServeMux()
	root.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok")
	})
	root.HandleFunc("GET /readyz", s.ready)
	root.Handle("/", s.authenticate(apiMux))
	s.route = newRouteOf(root, apiMux, known)
	return s.logRequests(root)
}

// handlerFunc is an API handler; an error it returns becomes the JSON error
// answer (see writeError).
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

func (s *server) handle(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, err)
		}
	})
}

func (s *server) noRoute(_ http.ResponseWriter, r *http.Request) error {
	return &httpError{http.StatusNotFound, api.ClassNotFound, "no such API: " + r.Method + " " + r.URL.Path}
}

func (s *server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if err := s.st.Ping(ctx); err != nil {
		recordError(w, err)
		writeText(w, http.StatusServiceUnavailable, "database unavailable")
		return
	}
	writeText(w, http.StatusOK, "ok")
}

// recorder keeps what the request log line needs: the status and the cause
// of an error answer (which the client does not see for a 500).
type recorder struct {
	http.ResponseWriter
	status int
	err    error
	// tokenID and role say who called (the token's public id, never the
	// token); empty before authentication.
	tokenID, role string
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// recordError hands the cause of an error answer to the request log.
func recordError(w http.ResponseWriter, err error) {
	if rec, ok := w.(*recorder); ok {
		rec.err = err
	}
}

// recordPrincipal hands the caller's token id and role to the request log.
func recordPrincipal(w http.ResponseWriter, t store.Token) {
	if rec, ok := w.(*recorder); ok {
		rec.tokenID, rec.role = t.ID, string(t.Role)
	}
}

// logRequests writes one line per request: debug when it went well, warn
// for the client's errors, error for the server's; and counts it by route.
func (s *server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		done := s.requests.Start()
		defer done()
		route := s.route(r) // before serving: handlers may change r
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		took := time.Since(start)
		s.requests.Observe(route, r.Method, rec.status, took)
		level := slog.LevelDebug
		switch {
		case rec.status >= 500:
			level = slog.LevelError
		case rec.status >= 400:
			level = slog.LevelWarn
		}
		attrs := []slog.Attr{
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", rec.status),
			slog.Duration("duration", took),
		}
		if r.URL.RawQuery != "" {
			attrs = append(attrs, slog.String("query", r.URL.RawQuery))
		}
		if rec.tokenID != "" {
			attrs = append(attrs, slog.String("token_id", rec.tokenID), slog.String("role", rec.role))
		}
		if rec.err != nil {
			attrs = append(attrs, slog.String("error", rec.err.Error()))
		}
		s.log.LogAttrs(r.Context(), level, "request", attrs...)
	})
}
