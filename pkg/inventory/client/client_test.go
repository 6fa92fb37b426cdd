package client

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/server"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
	"yunion.io/x/mps-daemon/pkg/restcall"
)

// failing fronts the real API: the first `failures` calls get fail, the
// others reach the API. calls counts them all.
func failing(failures int32, calls *atomic.Int32, fail http.HandlerFunc) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) <= failures {
				fail(w, r)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func status(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
}

// fastClient retries without waiting long.
func fastClient(inv *inventory, retries int) *Client {
	c := New(Options{URL: inv.url, Token: inv.token, Retries: retries})
	c.backoffBase = time.Millisecond
	return c
}

func TestRetries(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		const unavailable = `{"code":503,"class":"ServiceUnavailable","details":"try later"}`
		hangUp := func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}
		tests := []struct {
			name      string
			failures  int32
			fail      http.HandlerFunc
			retries   int
			wantCalls int32
			// wantStatus is the APIError status expected; 0 means success,
			// -1 a transport error.
			wantStatus int
		}{
			{"503 twice then success", 2, status(503, unavailable), 0, 3, 0},
			{"429 then success", 1, status(429, `{"code":429,"class":"TooManyRequests","details":"slow down"}`), 0, 2, 0},
			{"connection dropped twice then success", 2, hangUp, 0, 3, 0},
			{"400 is not retried", 5, status(400, `{"code":400,"class":"InputParameterError","details":"bad"}`), 0, 1, 400},
			{"404 is not retried", 5, status(404, `{"code":404,"class":"ResourceNotFoundError","details":"gone"}`), 0, 1, 404},
			{"retries run out", 10, status(503, unavailable), 2, 3, 503},
			{"no retries", 10, status(500, "boom"), -1, 1, 500},
			{"connection dropped every time", 10, hangUp, 1, 2, -1},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var calls atomic.Int32
				inv := newInventory(t, open(), server.Options{}, failing(tt.failures, &calls, tt.fail))
				list, err := fastClient(inv, tt.retries).ListHosts(t.Context(), ListHostsOptions{})
				if n := calls.Load(); n != tt.wantCalls {
					t.Errorf("%d calls reached the server, want %d", n, tt.wantCalls)
				}
				var ae *APIError
				switch {
				case tt.wantStatus == 0:
					if err != nil || list == nil {
						t.Errorf("ListHosts = %v, %v; want success", list, err)
					}
				case tt.wantStatus == -1:
					if err == nil || errors.As(err, &ae) {
						t.Errorf("err = %v, want a transport error", err)
					}
				default:
					if !errors.As(err, &ae) || ae.Status != tt.wantStatus {
						t.Errorf("err = %#v, want an APIError with status %d", err, tt.wantStatus)
					}
				}
			})
		}
	})
}

// An attempt that hangs is cut by Timeout and retried.
func TestAttemptTimeout(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		var calls atomic.Int32
		inv := newInventory(t, open(), server.Options{}, failing(1, &calls, func(_ http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // the client gives up on this attempt
		}))
		c := New(Options{URL: inv.url, Token: inv.token, Timeout: 200 * time.Millisecond})
		c.backoffBase = time.Millisecond
		if _, err := c.ListHosts(t.Context(), ListHostsOptions{}); err != nil {
			t.Fatalf("ListHosts: %v", err)
		}
		if n := calls.Load(); n != 2 {
			t.Errorf("%d calls, want 2 (one timed out, one answered)", n)
		}
	})
}

// Cancelling the caller's context stops the retries.
func TestCancelStopsRetries(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		ctx, cancel := context.WithCancel(t.Context())
		var calls atomic.Int32
		inv := newInventory(t, open(), server.Options{}, failing(100, &calls, func(w http.ResponseWriter, r *http.Request) {
			cancel()
			status(503, "")(w, r)
		}))
		c := New(Options{URL: inv.url, Token: inv.token, Retries: 100})
		c.backoffBase = time.Hour // only the cancellation can end the wait
		_, err := c.ListHosts(ctx, ListHostsOptions{})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("%d calls after cancel, want 1", n)
		}
	})
}

func TestAPIErrors(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		ctx := t.Context()
		inv, c, h := newInventoryWithHost(t, open())

		const unknown = "0b5e5b4e-5d5c-4d6a-9b1a-0c1d2e3f4a5b"
		_, err := c.GetIsolatedDevice(ctx, unknown)
		var ae *APIError
		if !errors.As(err, &ae) || !IsNotFound(err) || ae.Class != api.ClassNotFound || err.Error() != "isolated_device "+unknown+" not found" {
			t.Errorf("GetIsolatedDevice of a missing id: %#v", err)
		}

		d := gpuSlices("06", 1)[0]
		d.HostID, d.DevType = h.ID, api.DevTypeNvidiaMPS
		if _, err := c.CreateIsolatedDevice(ctx, d); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CreateIsolatedDevice(ctx, d); !IsConflict(err) || IsDeviceInUse(err) {
			t.Errorf("duplicate create: %v, want a conflict that is not in-use", err)
		}

		_, err = New(Options{URL: inv.url, Token: "wrong"}).ListHosts(ctx, ListHostsOptions{})
		if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
			t.Errorf("wrong token: %v, want 401", err)
		}
		if _, err := New(Options{URL: "localhost:9330"}).ListHosts(ctx, ListHostsOptions{}); err == nil {
			t.Errorf("a URL without scheme was accepted")
		}
	})
}

// Agents registering the same host at once all get the one host.
func TestEnsureHostRace(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		var inv *inventory
		var once sync.Once
		inv = newInventory(t, open(), server.Options{}, func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == "POST" && r.URL.Path == "/hosts" {
					once.Do(func() {
						if _, err := inv.st.CreateHost(r.Context(), api.Host{Name: "gpu-1"}); err != nil {
							t.Errorf("racing create: %v", err)
						}
					})
				}
				next.ServeHTTP(w, r)
			})
		})
		h, err := inv.newClient().EnsureHost(t.Context(), "gpu-1")
		if err != nil {
			t.Fatalf("EnsureHost after losing the race: %v", err)
		}
		winner, err := inv.st.GetHost(t.Context(), "gpu-1")
		if err != nil || h.ID != winner.ID {
			t.Errorf("EnsureHost = %s, the winner is %s (%v)", h.ID, winner.ID, err)
		}
	})
}

// The inventory's Retry-After sets the wait before the next try (capped,
// so a confused proxy cannot park the agent); the waits themselves are
// restcall's, tested there.
func TestRetryAfterIsHonouredAndCapped(t *testing.T) {
	for _, tt := range []struct {
		header string
		want   time.Duration
	}{{"7", 7 * time.Second}, {"3600", maxRetryAfter}, {"", 0}, {"soon", 0}, {"-5", 0}} {
		ans := restcall.Answer{Status: 503, Header: http.Header{"Retry-After": {tt.header}}}
		if got := retryAfter(apiError(ans)); got != tt.want {
			t.Errorf("Retry-After %q: wait %v, want %v", tt.header, got, tt.want)
		}
	}
}

// A token replaced under a long-running client (the local inventory wrote a
// new admin token file) is picked up after one 401, without a restart; an
// unchanged token is not retried, so a wrong token still fails at once.
func TestTokenSourceAfterUnauthorized(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		inv := newInventory(t, open(), server.Options{}, nil)
		var reads atomic.Int32
		fresh := inv.token
		c := New(Options{URL: inv.url, Token: "mpsi_0000000000000000_stale", TokenSource: func() (string, error) {
			reads.Add(1)
			return fresh, nil
		}})
		if _, err := c.ListHosts(t.Context(), ListHostsOptions{}); err != nil {
			t.Fatalf("with the token file renewed: %v", err)
		}
		if reads.Load() != 1 {
			t.Errorf("token source read %d times, want once", reads.Load())
		}
		fresh = "mpsi_0000000000000000_still-wrong"
		c = New(Options{URL: inv.url, Token: fresh, TokenSource: func() (string, error) { reads.Add(1); return fresh, nil }})
		if _, err := c.ListHosts(t.Context(), ListHostsOptions{}); !hasStatus(err, http.StatusUnauthorized) {
			t.Errorf("an unchanged wrong token must fail with 401, got %v", err)
		}
	})
}
