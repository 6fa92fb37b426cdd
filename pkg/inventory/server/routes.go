package server

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"yunion.io/x/mps-daemon/pkg/api"
)

// methodsOf lists the methods some route serves on r's path, in the order
// of an Allow header; none when no route has the path.
type methodsOf func(r *http.Request) []string

// newMethodsOf asks a mux holding every route with a method (the known
// patterns but the catch-alls "/" and "/v3/") which method would be
// served on a path. A mux matches "GET" patterns for HEAD too, so HEAD is
// listed where GET is, as Go's own 405 lists it.
func newMethodsOf(known map[string]bool) methodsOf {
	probe := http.NewServeMux()
	var methods []string
	for pattern := range known {
		method, _, ok := strings.Cut(pattern, " ")
		if !ok {
			continue
		}
		probe.Handle(pattern, http.NotFoundHandler())
		if !slices.Contains(methods, method) {
			methods = append(methods, method)
		}
		if method == http.MethodGet && !slices.Contains(methods, http.MethodHead) {
			methods = append(methods, http.MethodHead)
		}
	}
	slices.SortFunc(methods, func(a, b string) int { return methodRank(a) - methodRank(b) })
	return func(r *http.Request) []string {
		var allow []string
		for _, m := range methods {
			q := r.WithContext(r.Context())
			q.Method = m
			if _, p := probe.Handler(q); known[p] {
				allow = append(allow, m)
			}
		}
		return allow
	}
}

// methodRank orders the methods of an Allow header: reads, then writes.
func methodRank(m string) int {
	if i := slices.Index([]string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete}, m); i >= 0 {
		return i
	}
	return 100
}

// unserved is the answer to a request that no route serves: the client's
// error, never the server's. A path served with other methods is a 405
// MethodNotAllowedError listing them in Allow (Cloudpods' region answers
// those 404 too); any other path a 404 NotFoundError, the class a region
// gives a path it has no handler for, whose details are format with the
// method and the path.
func (s *server) unserved(w http.ResponseWriter, r *http.Request, format string) error {
	if allow := s.methods(r); len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		return &httpError{http.StatusMethodNotAllowed, api.ClassMethodNotAllowed,
			fmt.Sprintf("%s is not served on %s: use %s", r.Method, r.URL.Path, strings.Join(allow, ", "))}
	}
	return &httpError{http.StatusNotFound, api.ClassHandlerNotFound, fmt.Sprintf(format, r.Method, r.URL.Path)}
}
