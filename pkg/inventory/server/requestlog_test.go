package server

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// A storm of refused attaches (no free device: an answer a client
// expects) writes no warning and a bounded number of lines at info;
// refused credentials stay warnings (issue 34: 577,000 warn lines).
func TestRefusedAttachStormWritesABoundedLog(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		devs := seedGPUs(t, e.st, "gpu-1", 1, 1)
		e.mustCall("POST", "/servers/pod-a/attach-isolated-device", `{"server":{"device":"`+devs[0].ID+`"}}`, nil)
		const storm = 300
		start := time.Now()
		for range storm {
			status, body := e.call("POST", "/servers/pod-b/attach-isolated-device",
				`{"server":{"model":"NVIDIA H100 80GB HBM3","count":1,"sharing_mode":"EXCLUSIVE"}}`)
			if status/100 != 4 {
				t.Fatalf("attach with no free device: %d %s, want a 4xx refusal", status, body)
			}
		}
		windows := int(time.Since(start)/summaryWindow) + 1
		log := e.log.String()
		var warn, info int
		for _, l := range strings.Split(log, "\n") {
			switch {
			case strings.Contains(l, "level=WARN"), strings.Contains(l, "level=ERROR"):
				warn++
			case strings.Contains(l, "level=INFO"):
				info++
			}
		}
		if warn != 0 || info > 2*windows {
			t.Errorf("%d refused attaches wrote %d lines at warn or error and %d at info (want 0 and at most %d)", storm, warn, info, 2*windows)
		}
		if !strings.Contains(log, `msg="client error answered`) {
			t.Errorf("the refusals are not in the log at all:\n%.2000s", log)
		}

		// A refused credential is still a warning.
		status, _, _ := e.callFull("GET", "/isolated_devices", "", "Authorization", "Bearer not-a-token")
		if status != http.StatusUnauthorized || !strings.Contains(e.log.String(), "level=WARN msg=request method=GET path=/isolated_devices status=401") {
			t.Errorf("a refused token: %d, not logged at warn:\n%s", status, e.log.String())
		}
	})
}

// clockedServer is a server on st whose log summaries run on the clock
// the test sets and on the ticks it sends (tick): the ticker's work for a
// tick is done when tick returns.
type clockedServer struct {
	h     *Server
	log   *syncBuffer
	mu    sync.Mutex
	now   time.Time
	ticks chan time.Time
}

func newClockedServer(t *testing.T, st *store.Store, start time.Time) *clockedServer {
	t.Helper()
	c := &clockedServer{log: &syncBuffer{}, now: start, ticks: make(chan time.Time)}
	log := slog.New(slog.NewTextHandler(c.log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c.h = New(st, Options{Now: c.clock}, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.h.s.runSummaries(ctx, c.ticks)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

func (c *clockedServer) clock() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clockedServer) set(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = at
}

// tick is the ticker firing at the clock's time; the second send returns
// once the ticker took it, so once the first tick's summaries are written.
func (c *clockedServer) tick() {
	c.ticks <- c.clock()
	c.ticks <- c.clock()
}

// serve sends one request from addr, with a bearer token (none when "").
func (c *clockedServer) serve(t *testing.T, method, path, token, addr string) int {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = addr
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	c.h.ServeHTTP(w, r)
	return w.Code
}

// lines are the log's lines at level holding every one of parts.
func (c *clockedServer) lines(level string, parts ...string) []string {
	var out []string
	for _, l := range strings.Split(c.log.String(), "\n") {
		if !strings.Contains(l, "level="+level+" ") {
			continue
		}
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			out = append(out, l)
		}
	}
	return out
}

// A fleet whose token was rotated: 10,000 requests with a token the
// inventory does not know write one warning at once, naming the token's
// id and the address, and one summary line with the count when the
// minute ends, written by the ticker at its first tick after the minute
// (not by the next refusal); a second address is a key of its own. A key
// quiet for a minute is forgotten: its next refusal is written at once.
func TestRefusedCredentialsAreSummarisedOnTime(t *testing.T) {
	st := storetest.Open(t, storetest.SQLiteDSN(t))
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	c := newClockedServer(t, st, t0)
	const rotated = "mpsi_00000000deadbeef_" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	const storm = 10000
	for range 3 {
		c.serve(t, "GET", "/hosts", "not-a-token", "198.51.100.9:1234")
	}
	for i := range storm {
		c.set(t0.Add(time.Duration(i) * 5 * time.Millisecond)) // 50 s
		if code := c.serve(t, "GET", "/isolated_devices?host=gpu-1", rotated, "192.0.2.7:40000"); code != http.StatusUnauthorized {
			t.Fatalf("request %d with a bad token: %d", i, code)
		}
	}
	c.tick()
	warn := c.lines("WARN")
	if len(warn) != 2 || len(c.lines("WARN", "token_id=00000000deadbeef", "remote_addr=192.0.2.7", "status=401")) != 1 ||
		len(c.lines("WARN", "token_id=malformed", "remote_addr=198.51.100.9")) != 1 {
		t.Fatalf("%d refusals from two addresses wrote, before the minute ended:\n%s\nwant the first of each, with its token id and address",
			storm+3, strings.Join(warn, "\n"))
	}
	if n := len(strings.Split(c.log.String(), "\n")); n > 4 {
		t.Errorf("%d log lines for %d refused requests", n, storm+3)
	}

	// 59.999 s after the first: not yet. At the minute: at the first tick.
	c.set(t0.Add(summaryWindow - time.Millisecond))
	c.tick()
	if got := c.lines("WARN", "refused credentials"); len(got) != 0 {
		t.Fatalf("summary written before the minute ended: %v", got)
	}
	c.set(t0.Add(summaryWindow))
	c.tick()
	sum := c.lines("WARN", "refused credentials", "token_id=00000000deadbeef", "remote_addr=192.0.2.7")
	if len(sum) != 1 || !strings.Contains(sum[0], "requests=9999 ") || !strings.Contains(sum[0], "since=2026-11-27T12:00:00.000Z") ||
		!strings.Contains(sum[0], `by_route="GET /isolated_devices 401: 9999"`) {
		t.Fatalf("the minute's summary of the rotated token:\n%s", strings.Join(c.lines("WARN"), "\n"))
	}
	other := c.lines("WARN", "refused credentials", "token_id=malformed")
	if len(other) != 1 || !strings.Contains(other[0], "requests=2 ") {
		t.Errorf("the other address's summary: %v", other)
	}

	// Quiet for a minute: no line, and the key is forgotten.
	c.set(t0.Add(2 * summaryWindow))
	c.tick()
	if n := len(c.lines("WARN")); n != 4 {
		t.Errorf("a quiet minute wrote lines: %d at warn, want 4", n)
	}
	c.set(t0.Add(2*summaryWindow + time.Second))
	c.serve(t, "GET", "/isolated_devices", rotated, "192.0.2.7:40001")
	if n := len(c.lines("WARN", "token_id=00000000deadbeef", "msg=request")); n != 2 {
		t.Errorf("the first refusal after a quiet minute is not written at once (%d request lines)", n)
	}
}

// A valid token refused what it asked (403): one warning at once naming
// the token, its role and host and the address, then the minute's count;
// the client's other errors (404, refused attaches) one info line at once
// and the minute's summary, both on time.
func TestForbiddenAndClientErrorsAreSummarisedOnTime(t *testing.T) {
	st := storetest.Open(t, storetest.SQLiteDSN(t))
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	c := newClockedServer(t, st, t0)
	viewer, tok, err := st.CreateToken(t.Context(), store.NewToken{Name: "dash", Role: store.RoleViewer})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		c.set(t0.Add(time.Duration(i) * 10 * time.Millisecond))
		if code := c.serve(t, "DELETE", "/hosts/gpu-1", viewer, "192.0.2.8:5000"); code != http.StatusForbidden {
			t.Fatalf("a viewer's DELETE: %d", code)
		}
		if code := c.serve(t, "GET", "/isolated_devices/no-such-device", viewer, "192.0.2.8:5000"); code != http.StatusNotFound {
			t.Fatalf("GET of an unknown device: %d", code)
		}
	}
	c.tick()
	if got := c.lines("WARN"); len(got) != 1 || !strings.Contains(got[0], "token_id="+tok.ID) ||
		!strings.Contains(got[0], "role=viewer") || !strings.Contains(got[0], "remote_addr=192.0.2.8") || !strings.Contains(got[0], "status=403") {
		t.Fatalf("1000 forbidden requests wrote at warn:\n%s", strings.Join(got, "\n"))
	}
	if got := c.lines("INFO"); len(got) != 1 || !strings.Contains(got[0], "client error answered") {
		t.Fatalf("1000 404s wrote at info:\n%s", strings.Join(got, "\n"))
	}
	c.set(t0.Add(summaryWindow))
	c.tick()
	if got := c.lines("WARN", "forbidden requests", "token_id="+tok.ID, "requests=999 "); len(got) != 1 ||
		!strings.Contains(got[0], `by_route="DELETE /hosts/{id} 403: 999"`) {
		t.Errorf("the forbidden summary:\n%s", c.log.String())
	}
	if got := c.lines("INFO", `msg="client errors answered" requests=999 `); len(got) != 1 ||
		!strings.Contains(got[0], `by_route="GET /isolated_devices/{id} 404: 999"`) {
		t.Errorf("the client errors' summary:\n%s", c.log.String())
	}
}

// More keys than maxSummaryKeys at once (a token id made up per request)
// are counted under one, so the summaries' memory stays bounded.
func TestSummaryKeysAreBounded(t *testing.T) {
	var s summary
	log := slog.New(slog.DiscardHandler)
	t0 := time.Now()
	firsts := 0
	for i := range 3 * maxSummaryKeys {
		if s.add(context.Background(), log, t0, strconv.Itoa(i), nil, "GET / 401") {
			firsts++
		}
	}
	if len(s.keys) != maxSummaryKeys+1 || firsts != maxSummaryKeys+1 {
		t.Errorf("%d keys, %d written at once; want %d of each", len(s.keys), firsts, maxSummaryKeys+1)
	}
	if k := s.keys[otherKey]; k == nil || k.n != 2*maxSummaryKeys-1 {
		t.Errorf("the other keys' count: %+v", k)
	}
}
