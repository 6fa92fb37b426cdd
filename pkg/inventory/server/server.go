// Package server is the inventory's REST API: a small Cloudpods region for
// the `isolated_devices` resource (and the `hosts` its devices belong to),
// with the same paths, JSON envelopes, field names, list parameters and
// error bodies, and a keystone v3 face (keystone_face.go) that lets Cloudpods'
// own climc and host agent log in and find it in the service catalog. See
// docs/inventory.md for what is implemented and what answers 501. Storage
// is pkg/inventory/store.
package server

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"yunion.io/x/mps-daemon/pkg/inventory/store"
	"yunion.io/x/mps-daemon/pkg/metrics"
)

// Options configures the API. There is no way to turn authentication off:
// every call but /healthz, /readyz and the keystone login needs a token
// (see auth.go and auth_policy.go).
type Options struct {
	// MaxBodyBytes bounds request bodies; 0 means 1 MiB.
	MaxBodyBytes int64
	// Region is the keystone region of the service catalog; "" means
	// DefaultRegion. Cloudpods' clients find endpoints by it
	// (OS_REGION_NAME), or take any region when they name none.
	Region string
	// PublicURL is the inventory's URL in the service catalog; "" means
	// the scheme and Host of each request.
	PublicURL string
	// KeystoneTokenTTL is how long a keystone token is good for; 0 means
	// DefaultKeystoneTokenTTL.
	KeystoneTokenTTL time.Duration
	// Now is the clock of the log's summaries (logsummary.go); nil means
	// time.Now.
	Now func() time.Time
	// HostCertificates: a request without a token whose TLS client
	// certificate verified against the listener's client CAs acts as a
	// host token of the host its subject's common name names
	// (certificateHost, auth.go). Only a listener that verifies client
	// certificates (client_auth_type VerifyClientCertIfGiven or
	// RequireAndVerifyClientCert) should have it.
	HostCertificates bool
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
	// region, publicURL and keystoneTTL are Options'.
	region, publicURL string
	keystoneTTL       time.Duration
	// hostCerts is Options.HostCertificates.
	hostCerts bool
	// policy is routePolicy(): who may call each route.
	policy map[string]access
	// requests counts and times requests by route (metrics.go), served
	// with the Go and process series at GET /metrics.
	requests *metrics.HTTP
	metrics  http.Handler
	route    routeOf
	// methods lists the methods served on a request's path (routes.go).
	methods methodsOf
	// summaries summarise refused credentials, forbidden calls and the
	// client's other errors in the log (logsummary.go), on the clock now.
	summaries *summaries
	now       func() time.Time
}

// Server is the API: an http.Handler, whose log summaries Run writes on
// time.
type Server struct {
	s       *server
	handler http.Handler
}

// ServeHTTP serves the API.
func (v *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { v.handler.ServeHTTP(w, r) }

// Run writes the log's summaries of failed requests as their windows end,
// every summaryTick, until ctx ends; then those pending. Without Run they
// are written by the next failure of their key after twice their window.
func (v *Server) Run(ctx context.Context) {
	t := time.NewTicker(summaryTick)
	defer t.Stop()
	v.s.runSummaries(ctx, t.C)
}

// runSummaries is Run with its ticks (tests send their own); the clock is
// the server's.
func (s *server) runSummaries(ctx context.Context, ticks <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			// Everything pending: as if every window had ended.
			s.summaries.flush(context.WithoutCancel(ctx), s.log, s.now().Add(summaryWindow))
			return
		case <-ticks:
			s.summaries.flush(ctx, s.log, s.now())
		}
	}
}

// New returns the API over st.
func New(st *store.Store, opts Options, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &server{
		st: st, log: log, maxBody: opts.MaxBodyBytes, policy: routePolicy(), requests: metrics.NewHTTP(metrics.InventoryPrefix),
		region: cmp.Or(opts.Region, DefaultRegion), publicURL: strings.TrimSuffix(opts.PublicURL, "/"),
		keystoneTTL: cmp.Or(opts.KeystoneTokenTTL, DefaultKeystoneTokenTTL),
		summaries:   newSummaries(), now: opts.Now, hostCerts: opts.HostCertificates,
	}
	if s.now == nil {
		s.now = time.Now
	}
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
		"GET /v3/auth/tokens":               s.checkToken,
		"HEAD /v3/auth/tokens":              s.checkToken,
		"DELETE /v3/auth/tokens":            s.revokeToken,
		"/v3/":                              s.keystoneNoRoute,
		"/":                                 s.noRoute,
	}
	s.addAllocRoutes(routes)  // attach, detach: alloc.go
	s.addRegionRoutes(routes) // zones, wires, networks: region.go
	known := map[string]bool{"GET /healthz": true, "GET /readyz": true, "POST /v3/auth/tokens": true}
	for pattern, h := range routes {
		apiMux.Handle(pattern, s.handle(s.authorize(pattern, h)))
		known[pattern] = true
	}

	root := http.NewServeMux()
	root.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok")
	})
	root.HandleFunc("GET /readyz", s.ready)
	// The keystone login is open: it is how a Cloudpods client gets a token.
	root.Handle("POST /v3/auth/tokens", s.requireJSON(s.handle(s.issueToken)))
	root.Handle("/", s.authenticate(s.requireJSON(apiMux)))
	s.route = newRouteOf(root, apiMux, known)
	s.methods = newMethodsOf(known)
	return &Server{s: s, handler: s.logRequests(root)}
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

// noRoute answers a request no route serves, as the client's error: 405
// with Allow when the path is served with other methods (TRACE, OPTIONS,
// PATCH on /isolated_devices), else 404. Neither is logged as the
// server's error (logRequests: 4xx at warn).
func (s *server) noRoute(w http.ResponseWriter, r *http.Request) error {
	return s.unserved(w, r, "mps-inventory has no %s %s (it serves isolated_devices, hosts and the servers' attach/detach actions of Cloudpods' region API: see docs/inventory.md)")
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
	// tokenID, role and host say who called (the token's public id, never
	// the token; a host token's host); empty before authentication.
	tokenID, role, host string
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
		rec.tokenID, rec.role, rec.host = t.ID, string(t.Role), t.Host
	}
}
