package region

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/cloudpods"
	"yunion.io/x/mps-daemon/pkg/keystone"
)

// What the backend reads from the region's answers, checked against the
// real region (Cloudpods master): the answers docs/cloudpods.md describes.

// The data-model probe: this region's isolated_devices has sharing_mode
// (the GPU-row model); a column its table lacks is answered 400 "model has
// no field <column>", which is what a region of the per-slice model, whose
// table lacks sharing_mode, answers to the same probe.
func TestModelProbeTellsColumnsApart(t *testing.T) {
	c := cloudpods.GetOrReplay(t, "region")
	ctx := context.Background()
	b := newBackend(t, c, c.HostMAC, Options{})
	if m, err := b.modelBy(ctx, c.HostID, modelColumn); err != nil || m != ModelGPU {
		t.Fatalf("probing %s: %q %v, want %q", modelColumn, m, err, ModelGPU)
	}
	const missing = "mps_no_such_column"
	err := c.Call(ctx, http.MethodGet, pathModelProbe+"?"+modelQuery(c.HostID, missing).Encode(), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "model has no field "+missing) {
		t.Fatalf("the region's answer for a column it lacks: %v, want 400 \"model has no field %s\"", err, missing)
	}
	if m, err := b.modelBy(ctx, c.HostID, missing); err != nil || m != ModelPerSlice {
		t.Fatalf("probing %s: %q %v, want %q", missing, m, err, ModelPerSlice)
	}
}

// A token the region does not take (made up here; a revoked or expired one
// is answered alike, tests/e2e's TestCloudpodsRegion) is refused on every
// read the backend acts on, as refusedToken recognises: never an empty list
// that would make SyncDevices create rows again. The one read that answers
// it, the model probe, decides by whether the column exists, which does not
// depend on the token.
func TestRefusedTokenNeverReadsAsAnEmptyList(t *testing.T) {
	c := cloudpods.GetOrReplay(t, "region")
	ctx := context.Background()
	mac := newMAC()
	name, ip := newHost("refused-token")
	hostID, err := c.CreateHost(ctx, name, mac, ip)
	if err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, c, mac, Options{})
	const bogus = "gAAAAAB-not-a-token-of-this-keystone"
	// The host record exists, and so does a GPU row. (No NVIDIA_MPS row:
	// this region takes one only once a device model defines the type,
	// which would change what the other tests of this binary see.)
	gpu := map[string]any{"host_id": hostID, "dev_type": devTypeGPU, "sharing_mode": sharingModeMPS, "addr": "7a:00.0",
		"virtual_num": 2, "model": "H100 SXM5 80GB", "vendor_device_id": "10de:2330"}
	if err := c.Call(ctx, http.MethodPost, pathDevices, wrap(gpu), nil); err != nil {
		t.Fatal(err)
	}
	reads := map[string]struct {
		path  string
		query url.Values
		rows  int // with a good token
	}{
		"host by MAC":    {pathHosts, byMACQuery(mac), 1},
		"GPU rows":       {pathDevices, rowsQuery(hostID, devTypeGPU), 1},
		"per-slice rows": {pathDevices, rowsQuery(hostID, devTypeMPS), 0},
	}
	for name, r := range reads {
		var with struct {
			Hosts   []json.RawMessage `json:"hosts"`
			Devices []json.RawMessage `json:"isolated_devices"`
		}
		tok, err := b.o.Keystone.Token(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.c.once(ctx, tok, http.MethodGet, r.path, r.query, nil, &with); err != nil || len(with.Hosts)+len(with.Devices) != r.rows {
			t.Fatalf("%s with the token: %d rows, %v; want %d", name, len(with.Hosts)+len(with.Devices), err, r.rows)
		}
		var refused json.RawMessage
		err = b.c.once(ctx, bogus, http.MethodGet, r.path, r.query, nil, &refused)
		if !refusedToken(err) {
			t.Errorf("%s with a refused token: %v (answer %s), want 401 or 403 allow:none", name, err, refused)
		}
	}
	for column, want := range map[string]string{modelColumn: ModelGPU, "mps_no_such_column": ModelPerSlice} {
		err := b.c.once(ctx, bogus, http.MethodGet, pathModelProbe, modelQuery(hostID, column), nil, nil)
		if m, ok := modelOf(err); !ok || m != want {
			t.Errorf("probing %s with a refused token: %q (%v), want %q as with a good one", column, m, err, want)
		}
	}
}

// A wrong password: the real keystone refuses it (401), the backend fails
// with keystone.ErrUnauthorized after one attempt (no retry mends it), and
// neither the error nor a log line carries the password.
func TestWrongPasswordFailsOnceWithoutTheSecret(t *testing.T) {
	c := cloudpods.GetOrReplay(t, "region")
	target, err := url.Parse(c.AuthURL)
	if err != nil {
		t.Fatal(err)
	}
	var auths atomic.Int32
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/auth/tokens") {
			auths.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	const password = "Not-the-sysadmin-password-42"
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ks, err := keystone.New(keystone.Options{Credentials: keystone.Credentials{
		AuthURL: srv.URL + target.Path, User: c.User, Password: password, Project: c.Project, Region: c.RegionName,
	}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Options{Keystone: ks, NICs: func() ([]NIC, error) { return []NIC{{MAC: c.HostMAC}}, nil }, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.EnsureHost(context.Background(), "x")
	if !errors.Is(err, keystone.ErrUnauthorized) {
		t.Fatalf("EnsureHost with a wrong password: %v, want keystone.ErrUnauthorized", err)
	}
	if n := auths.Load(); n != 1 {
		t.Errorf("keystone was asked %d times, want once: a refused password is not retried", n)
	}
	if strings.Contains(err.Error(), password) || strings.Contains(logs.String(), password) {
		t.Errorf("the password leaked:\nerror: %v\nlog: %s", err, logs.String())
	}
}
