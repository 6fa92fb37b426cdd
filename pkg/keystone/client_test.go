package keystone

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeKeystone answers POST /v3/auth/tokens like Cloudpods' keystone: 200,
// X-Subject-Token, a token with issued_at/expires_at and a catalog. It
// counts authentications and refuses a wrong password with 401.
type fakeKeystone struct {
	srv      *httptest.Server
	auths    atomic.Int32
	failNext atomic.Int32 // answer 503 this many times
	lifetime time.Duration
}

func newFakeKeystone(t *testing.T, lifetime time.Duration) *fakeKeystone {
	f := &fakeKeystone{lifetime: lifetime}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v3/auth/tokens" {
			http.NotFound(w, r)
			return
		}
		if f.failNext.Load() > 0 {
			f.failNext.Add(-1)
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		var req authRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		u := req.Auth.Identity.Password.User
		if u.Name != "sysadmin" || u.Password != "s3cret" || u.Domain.Name != "Default" || req.Auth.Scope.Project.Name != "system" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":{"code":401,"class":"Unauthorized","details":"wrong user or password"}}`)
			return
		}
		n := f.auths.Add(1)
		now := time.Now().UTC()
		w.Header().Set("X-Subject-Token", fmt.Sprintf("tok-%d", n))
		fmt.Fprintf(w, `{"token":{"issued_at":%q,"expires_at":%q,"catalog":[
		  {"type":"identity","name":"keystone","endpoints":[{"interface":"internal","region_id":"region0","url":"http://ks"}]},
		  {"type":"compute_v2","name":"region2","endpoints":[
		    {"interface":"public","region_id":"region0","url":"http://public:8889/"},
		    {"interface":"internal","region_id":"region0","url":"http://internal:8889/"},
		    {"interface":"internal","region_id":"region1","url":"http://other:8889"}]}]}}`,
			now.Format(time.RFC3339Nano), now.Add(f.lifetime).Format(time.RFC3339Nano))
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func creds(url string) Credentials {
	return Credentials{AuthURL: url + "/v3", User: "sysadmin", Password: "s3cret", Project: "system", Region: "region0"}
}

func TestTokenIsReusedThenRenewedBeforeExpiry(t *testing.T) {
	f := newFakeKeystone(t, time.Hour)
	now := time.Now()
	clock := func() time.Time { return now }
	c, err := New(Options{Credentials: creds(f.srv.URL), Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t1, err := c.Token(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if t2, _ := c.Token(ctx); t2 != t1 || f.auths.Load() != 1 {
		t.Fatalf("second Token: %q after %d authentications, want the same token %q from one", t2, f.auths.Load(), t1)
	}
	now = now.Add(49 * time.Minute) // 11 minutes left: still good
	if t3, _ := c.Token(ctx); t3 != t1 {
		t.Fatalf("token renewed with 11 minutes left")
	}
	now = now.Add(6 * time.Minute) // 5 minutes left, under a tenth of the hour: renewed
	t4, err := c.Token(ctx)
	if err != nil || t4 == t1 || f.auths.Load() != 2 {
		t.Fatalf("with 5 minutes left: token %q (err %v) after %d authentications, want a new one", t4, err, f.auths.Load())
	}
}

func TestRefusedTokenIsReplacedOnce(t *testing.T) {
	f := newFakeKeystone(t, time.Hour)
	c, _ := New(Options{Credentials: creds(f.srv.URL)})
	ctx := context.Background()
	t1, _ := c.Token(ctx)
	c.Refused("an older token") // someone else's stale news: ignored
	if t2, _ := c.Token(ctx); t2 != t1 {
		t.Fatal("a 401 for another token dropped the current one")
	}
	c.Refused(t1)
	t3, err := c.Token(ctx)
	if err != nil || t3 == t1 || f.auths.Load() != 2 {
		t.Fatalf("after a 401: token %q err %v, %d authentications", t3, err, f.auths.Load())
	}
}

func TestEndpointFromCatalog(t *testing.T) {
	f := newFakeKeystone(t, time.Hour)
	for _, tc := range []struct {
		region, iface, want string
		err                 bool
	}{
		{"region0", "internal", "http://internal:8889", false},
		{"region0", "public", "http://public:8889", false},
		{"region1", "internal", "http://other:8889", false},
		{"", "internal", "", true}, // two regions: the operator must say which
		{"region9", "internal", "", true},
	} {
		cr := creds(f.srv.URL)
		cr.Region, cr.Interface = tc.region, tc.iface
		c, _ := New(Options{Credentials: cr})
		got, err := c.Endpoint(context.Background(), "compute_v2")
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("region %q %s: got %q err %v, want %q (error %v)", tc.region, tc.iface, got, err, tc.want, tc.err)
		}
		if tc.err && !errors.Is(err, ErrNoEndpoint) {
			t.Errorf("region %q: error %v is not ErrNoEndpoint", tc.region, err)
		}
	}
}

func TestWrongPasswordIsNotRetriedAndNotLogged(t *testing.T) {
	f := newFakeKeystone(t, time.Hour)
	var logs bytes.Buffer
	cr := creds(f.srv.URL)
	cr.Password = "wrong-passw0rd"
	c, _ := New(Options{Credentials: cr, Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	_, err := c.Token(context.Background())
	if !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("want ErrUnauthorized, got %v", err)
	}
	if strings.Contains(err.Error()+logs.String(), "wrong-passw0rd") {
		t.Fatalf("the password leaked: %v\n%s", err, logs.String())
	}
}

func TestOutageIsRetriedWithBackoff(t *testing.T) {
	f := newFakeKeystone(t, time.Hour)
	f.failNext.Store(2)
	var logs bytes.Buffer
	c, _ := New(Options{Credentials: creds(f.srv.URL), Log: slog.New(slog.NewTextHandler(&logs, nil))})
	tok, err := c.Token(context.Background())
	if err != nil || tok == "" {
		t.Fatalf("after two 503s: %v", err)
	}
	if strings.Contains(logs.String(), tok) {
		t.Fatalf("a token was logged:\n%s", logs.String())
	}
	f.failNext.Store(100)
	c2, _ := New(Options{Credentials: creds(f.srv.URL), Retries: 1})
	if _, err := c2.Token(context.Background()); err == nil {
		t.Fatal("keystone down: no error")
	}
}

func TestBadSettings(t *testing.T) {
	for _, cr := range []Credentials{
		{AuthURL: "keystone:5000", User: "u", Password: "p", Project: "p"},
		{AuthURL: "http://k/v3", Password: "p", Project: "p"},
		{AuthURL: "http://k/v3", User: "u", Project: "p"},
		{AuthURL: "http://k/v3", User: "u", Password: "p"},
	} {
		if _, err := New(Options{Credentials: cr}); err == nil {
			t.Errorf("%+v accepted", cr)
		}
	}
}
