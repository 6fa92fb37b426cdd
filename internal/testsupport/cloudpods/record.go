package cloudpods

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/replay"
)

// EnvRecord names the file a live control plane's exchanges are appended
// to (make test-cloudpods sets it): replay.Line a line, as replay.Derive
// reads them, with a marker (replay.TestEvent) where each test begins.
const EnvRecord = "MPS_CLOUDPODS_RECORD"

// recorder writes the exchanges clients have with keystone and the region
// through the proxies in front of them; safe for concurrent use.
type recorder struct {
	mu  sync.Mutex
	f   *os.File
	seq int
}

// openRecorder opens the file EnvRecord names; nil when it is not set.
func openRecorder() (*recorder, error) {
	path := os.Getenv(EnvRecord)
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the recording %s: %w", path, err)
	}
	return &recorder{f: f}, nil
}

func (r *recorder) write(l replay.Line) {
	b, err := json.Marshal(l)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = r.f.Write(append(b, '\n'))
}

// event writes a marker (replay's Event* values).
func (r *recorder) event(e string) { r.write(replay.Line{Event: e}) }

// mark writes the marker of the test's start, when recording.
func (c *Cloud) mark(t testing.TB) {
	if c.rec != nil {
		c.rec.event(replay.TestEvent(t.Name()))
	}
}

// secrets are the JSON fields whose string values are never written.
var secrets = map[string]bool{"password": true, "token": true, "tokens": true, "admin_password": true, "secret": true}

// redact replaces secrets in a decoded JSON value.
func redact(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if _, ok := e.(string); ok && secrets[k] {
				x[k] = "<redacted>"
				continue
			}
			x[k] = redact(e)
		}
	case []any:
		for i := range x {
			x[i] = redact(x[i])
		}
	}
	return v
}

// bodyOf is a body as a recording holds it: JSON decoded and redacted, else
// text, nil when empty.
func bodyOf(b []byte) any {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	var v any
	if json.Unmarshal(b, &v) == nil {
		return redact(v)
	}
	return string(b)
}

// rawBody is a body (bodyOf's) as JSON.
func rawBody(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

// recordedHeaders are the headers a recording keeps; the secret ones only
// as <redacted>.
var recordedHeaders = map[string]bool{
	"Content-Type": true, "User-Agent": true, "Allow": true, "Location": true, "Retry-After": true,
	"X-Auth-Token": false, "X-Subject-Token": false, "Authorization": false,
}

func headersOf(h http.Header) map[string]string {
	out := map[string]string{}
	for k, keep := range recordedHeaders {
		if v := h.Get(k); v != "" {
			if !keep {
				v = "<redacted>"
			}
			out[strings.ToLower(k)] = v
		}
	}
	return out
}

// serve serves service's proxy on 127.0.0.1:public, to 127.0.0.1:real.
func (r *recorder) serve(service string, public, real int) (*http.Server, error) {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(public)))
	if err != nil {
		return nil, fmt.Errorf("the recording proxy of %s: %w", service, err)
	}
	srv := &http.Server{Handler: r.proxy(service, &url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(real))}),
		ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(l) }() // ends when Stop closes it
	return srv, nil
}

// proxy is a reverse proxy to target that records each exchange as
// service's.
func (r *recorder) proxy(service string, target *url.URL) http.Handler {
	rp := httputil.NewSingleHostReverseProxy(target)
	// The proxy's own answer when the service is away (the region stopped
	// for an outage) says so in its text, which derive drops: a replay
	// makes an outage by closing connections instead.
	rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, err error) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "proxy: "+err.Error())
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		reqBody, _ := io.ReadAll(io.LimitReader(req.Body, 64<<20))
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
		// The service's answer is recorded even when the client has gone
		// (a daemon stopped while its request was in flight): what the
		// service did is what a replay must hold.
		req = req.WithContext(context.WithoutCancel(req.Context()))
		rec := &capture{ResponseWriter: w, status: http.StatusOK}
		rp.ServeHTTP(rec, req)
		r.mu.Lock()
		r.seq++
		seq := r.seq
		r.mu.Unlock()
		// The path as the client sent it (the proxy rewrote req.URL).
		path := req.URL.Path
		if req.URL.RawQuery != "" {
			path += "?" + req.URL.RawQuery
		}
		r.write(replay.Line{
			Seq: seq, T: float64(time.Now().UnixNano()) / 1e9, Service: service,
			Method: req.Method, Path: path, Status: rec.status,
			Request:  replay.Message{Headers: headersOf(req.Header), Body: rawBody(bodyOf(reqBody))},
			Response: replay.Message{Headers: headersOf(rec.Header()), Body: rawBody(redactToken(bodyOf(rec.body.Bytes())))},
		})
	})
}

// redactToken hides the token id at the top of keystone's login answer.
func redactToken(v any) any {
	if m, ok := v.(map[string]any); ok {
		if _, ok := m["id"].(string); ok {
			if _, isToken := m["token"]; isToken {
				m["id"] = "<redacted>"
			}
		}
	}
	return v
}

// capture keeps what a handler answered.
type capture struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (c *capture) WriteHeader(code int) { c.status = code; c.ResponseWriter.WriteHeader(code) }

func (c *capture) Write(b []byte) (int, error) {
	c.body.Write(b)
	return c.ResponseWriter.Write(b)
}
