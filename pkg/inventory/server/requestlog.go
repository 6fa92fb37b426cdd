package server

import (
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"
)

// logRequests counts each request by route and status and writes a line
// for it: error for the server's errors (5xx), debug for the rest. The
// client's errors are answers a client may send by the thousand (a fleet
// whose token was rotated, a scheduler retrying refused attaches), so each
// kind goes into a summary (logsummary.go): a refused credential (401) by
// the token it named and the address it came from, at warn; a forbidden
// call (403) by its token, role, host and address, at warn; any other 4xx
// (an attach refused for lack of a free device, a 404) as one summary at
// info. The first of a key is written at once, the rest counted and
// written by the ticker as one line a minute at most (issue 34: 577,000
// warn lines; issue 41: 10,000 lines for 10,000 bad tokens, and a summary
// written 8.5 minutes late).
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
		ctx := r.Context()
		if rec.status < 400 && !s.log.Enabled(ctx, slog.LevelDebug) {
			return // the line would not be written: nothing to build
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
		detail := r.Method + " " + route + " " + strconv.Itoa(rec.status)
		level := slog.LevelDebug
		switch {
		case rec.status >= 500:
			level = slog.LevelError
		case rec.status == http.StatusUnauthorized:
			key := []slog.Attr{slog.String("token_id", claimedTokenID(r)), slog.String("remote_addr", remoteIP(r))}
			if s.summaries.refused.add(ctx, s.log, s.now(), attrsKey(key), key, detail) {
				level = slog.LevelWarn
				attrs = append(attrs, key...)
				attrs = append(attrs, slog.String("more", "summed up in one line a minute"))
			}
		case rec.status == http.StatusForbidden:
			key := []slog.Attr{slog.String("token_id", rec.tokenID), slog.String("role", rec.role),
				slog.String("host", rec.host), slog.String("remote_addr", remoteIP(r))}
			if s.summaries.forbidden.add(ctx, s.log, s.now(), attrsKey(key), key, detail) {
				level = slog.LevelWarn
				attrs = append(attrs, slog.String("host", rec.host), slog.String("remote_addr", remoteIP(r)),
					slog.String("more", "summed up in one line a minute"))
			}
		case rec.status >= 400:
			if s.summaries.clientErrors.add(ctx, s.log, s.now(), "", nil, detail) {
				s.log.LogAttrs(ctx, slog.LevelInfo, "client error answered (more within a minute are summed up in one line)",
					slog.String("route", route), slog.Int("status", rec.status))
			}
		}
		s.log.LogAttrs(ctx, level, "request", attrs...)
	})
}

// attrsKey is a summary key of attrs' values.
func attrsKey(attrs []slog.Attr) string {
	var b []byte
	for _, a := range attrs {
		b = strconv.AppendQuote(b, a.Value.String())
	}
	return string(b)
}

// remoteIP is the address r came from, without its port (a client's
// connections share a key).
func remoteIP(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// claimedTokenID is the public id of the token r presented, as it claims
// it ("malformed" when it has none, "none" when r presented none): what
// an operator looks for in `mps-inventory token list` after a refusal.
func claimedTokenID(r *http.Request) string {
	tok, ok := presentedToken(r)
	switch {
	case !ok:
		return "none"
	case len(tok) > 22 && (tok[:5] == "mpsi_" || tok[:5] == "mpsk_") && tok[21] == '_' && isHex(tok[5:21]):
		return tok[5:21]
	}
	return "malformed"
}

func isHex(s string) bool {
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
