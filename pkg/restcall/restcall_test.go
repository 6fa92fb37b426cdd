package restcall

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"

	"yunion.io/x/mps-daemon/pkg/webtls"
)

func caller() Caller {
	return Caller{HTTP: &http.Client{}, Timeout: 5 * time.Second, MaxAnswer: 1 << 10}
}

func TestDoSendsJSONAndReadsAnyStatus(t *testing.T) {
	var got http.Header
	var body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		b := make([]byte, 64)
		n, _ := r.Body.Read(b)
		body = string(b[:n])
		w.Header().Set("X-Subject-Token", "t")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"code":409}`))
	}))
	defer srv.Close()
	ans, err := caller().Do(t.Context(), Request{Method: "POST", URL: srv.URL, Header: http.Header{"X-Auth-Token": {"secret"}}, JSON: []byte(`{"a":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if ans.Status != 409 || string(ans.Body) != `{"code":409}` || ans.Header.Get("X-Subject-Token") != "t" {
		t.Errorf("answer %+v", ans)
	}
	if got.Get("Content-Type") != "application/json" || got.Get("Accept") != "application/json" || got.Get("X-Auth-Token") != "secret" || body != `{"a":1}` {
		t.Errorf("sent headers %v body %q", got, body)
	}
}

func TestDoBoundsTheAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(strings.Repeat("x", 1<<10+1)))
	}))
	defer srv.Close()
	_, err := caller().Do(t.Context(), Request{Method: "GET", URL: srv.URL})
	if !errors.Is(err, ErrAnswerTooLarge) || IsNoAnswer(err) {
		t.Errorf("an answer over MaxAnswer: %v", err)
	}
}

func TestDoWithoutAnswer(t *testing.T) {
	hang := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hang.Close()
	c := caller()
	c.Timeout = 100 * time.Millisecond
	if _, err := c.Do(t.Context(), Request{Method: "GET", URL: hang.URL}); !IsNoAnswer(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a server that never answers: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if _, err := caller().Do(t.Context(), Request{Method: "GET", URL: "http://" + addr}); !IsNoAnswer(err) {
		t.Errorf("a refused connection: %v", err)
	}
	if _, err := caller().Do(t.Context(), Request{Method: "GET", URL: "http://[::1"}); err == nil || IsNoAnswer(err) {
		t.Errorf("a malformed URL must fail before sending, and is not worth retrying: %v", err)
	}
}

var errBusy = errors.New("busy")

func fast(retries int) Policy {
	return Policy{Retries: retries, First: time.Millisecond, Max: time.Millisecond,
		Retryable: func(err error) bool { return errors.Is(err, errBusy) }}
}

func TestRetryStopsWhereItShould(t *testing.T) {
	errBad := errors.New("bad request")
	tests := []struct {
		name      string
		fails     []error // what the calls return in turn; then nil
		retries   int
		wantCalls int
		wantErr   error
	}{
		{"success at once", nil, 3, 1, nil},
		{"busy twice, then success", []error{errBusy, errBusy}, 3, 3, nil},
		{"busy past the retries", []error{errBusy, errBusy, errBusy, errBusy, errBusy}, 2, 3, errBusy},
		{"no retries", []error{errBusy}, 0, 1, errBusy},
		{"not retryable", []error{errBad}, 3, 1, errBad},
		{"marked permanent", []error{Permanent(errBusy)}, 3, 1, errBusy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			var notified int
			p := fast(tt.retries)
			p.Notify = func(error, time.Duration) { notified++ }
			err := Retry(t.Context(), p, func() error {
				calls++
				if calls <= len(tt.fails) {
					return tt.fails[calls-1]
				}
				return nil
			})
			if calls != tt.wantCalls || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Errorf("%d calls, err %v; want %d calls, err %v", calls, err, tt.wantCalls, tt.wantErr)
			}
			var perm *backoff.PermanentError
			if errors.As(err, &perm) {
				t.Errorf("the backoff library's wrapper leaks: %#v", err)
			}
			if notified != calls-1 && err == nil {
				t.Errorf("%d retries notified for %d calls", notified, calls)
			}
		})
	}
}

// Cancelling the context ends the wait at once; the error says both why it
// ended and what the last try met.
func TestRetryEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	calls := 0
	p := fast(100)
	p.First, p.Max = time.Hour, time.Hour // only the cancellation can end the wait
	err := Retry(ctx, p, func() error {
		calls++
		cancel()
		return errBusy
	})
	if calls != 1 || !errors.Is(err, context.Canceled) || !errors.Is(err, errBusy) {
		t.Errorf("%d calls, err %v", calls, err)
	}
}

// The waits grow from First to Max, jittered by half either way, and a
// wait the service asked for wins when longer.
func TestWaitsGrowAndHonourTheServer(t *testing.T) {
	var last error
	p := &paced{exp: &backoff.ExponentialBackOff{InitialInterval: 100 * time.Millisecond, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: time.Second}, last: &last}
	p.Reset()
	for i, full := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		full *= time.Millisecond
		if d := p.NextBackOff(); d < full/2 || d > full*3/2 {
			t.Errorf("wait %d: %v outside [%v, %v]", i, d, full/2, full*3/2)
		}
	}
	p.after = func(err error) time.Duration {
		if errors.Is(err, errBusy) {
			return 7 * time.Second
		}
		return 0
	}
	last = errBusy
	if d := p.NextBackOff(); d != 7*time.Second {
		t.Errorf("asked for 7s: %v", d)
	}
	last = errors.New("other")
	if d := p.NextBackOff(); d > 1500*time.Millisecond {
		t.Errorf("no wait asked for: %v", d)
	}
}

func TestDefaults(t *testing.T) {
	mine := &http.Client{}
	for _, tt := range []struct {
		httpc       *http.Client
		timeout     time.Duration
		retries     int
		wantTimeout time.Duration
		wantRetries int
	}{
		{nil, 0, 0, 10 * time.Second, 3},
		{mine, time.Second, 5, time.Second, 5},
		{nil, -time.Second, -1, 10 * time.Second, 0},
	} {
		h, to, r := Defaults(tt.httpc, tt.timeout, tt.retries)
		if h == nil || (tt.httpc != nil && h != tt.httpc) || to != tt.wantTimeout || r != tt.wantRetries {
			t.Errorf("Defaults(%v, %v, %d) = %v, %v, %d", tt.httpc, tt.timeout, tt.retries, h, to, r)
		}
	}
}

func TestIsHTTPURL(t *testing.T) {
	for raw, want := range map[string]bool{
		"http://127.0.0.1:9330": true, "https://keystone:30357/v3": true,
		"keystone:5000": false, "ftp://host/": false, "http://": false, "": false, "http://[::1": false,
	} {
		if got := IsHTTPURL(raw); got != want {
			t.Errorf("IsHTTPURL(%q) = %v, want %v", raw, got, want)
		}
	}
}

// A certificate the client does not trust, and a plain request to a TLS
// port: refusals with their cause, not "no answer" (another try would
// fail the same), so callers do not retry them at once.
func TestTLSRefusalsAreNotNoAnswer(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{}`)) }))
	defer srv.Close()
	_, err := caller().Do(t.Context(), Request{Method: "GET", URL: srv.URL})
	var refused *webtls.RefusedError
	if !errors.As(err, &refused) || IsNoAnswer(err) || !strings.Contains(refused.Cause, "is signed by") {
		t.Errorf("an untrusted certificate: %v", err)
	}
	_, err = caller().Do(t.Context(), Request{Method: "GET", URL: strings.Replace(srv.URL, "https://", "http://", 1)})
	if !errors.As(err, &refused) || IsNoAnswer(err) || !strings.Contains(refused.Cause, "make it https://") {
		t.Errorf("plain HTTP to the TLS port: %v", err)
	}
	// The server's own certificate trusted: an answer.
	c := caller()
	c.HTTP = srv.Client()
	if ans, err := c.Do(t.Context(), Request{Method: "GET", URL: srv.URL}); err != nil || ans.Status != 200 {
		t.Errorf("trusted: %+v %v", ans, err)
	}
}
