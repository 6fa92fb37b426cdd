package server

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/golden"
	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// env is a real server over a real database (a SQLite file or a PostgreSQL
// database: see newEnvOn).
type env struct {
	t   *testing.T
	srv *httptest.Server
	st  *store.Store
	log *syncBuffer
	// admin is an admin token, sent by call unless the caller sets an
	// Authorization header itself.
	admin string
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// newEnvOn is an env over st, a store of any backend: tests run in
// storetest.ForEachBackend and pass open().
func newEnvOn(t *testing.T, st *store.Store, opts Options) *env {
	t.Helper()
	buf := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := httptest.NewServer(New(st, opts, log))
	t.Cleanup(srv.Close)
	admin, _, err := st.CreateToken(t.Context(), store.NewToken{Name: "test-admin", Role: store.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, srv: srv, st: st, log: buf, admin: admin}
}

// call sends a request and returns the status and body. header is pairs of
// name and value; without an Authorization pair the admin token is sent
// ("Authorization", "" sends none); a body goes as application/json unless
// a Content-Type pair says otherwise.
func (e *env) call(method, path, body string, header ...string) (int, []byte) {
	e.t.Helper()
	status, _, b := e.callFull(method, path, body, header...)
	return status, b
}

// callFull is call returning the answer's headers too.
func (e *env) callFull(method, path, body string, header ...string) (int, http.Header, []byte) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.admin)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// mustCall is call that fails the test unless the status is 200, and
// decodes the answer into out.
func (e *env) mustCall(method, path, body string, out any) []byte {
	e.t.Helper()
	status, b := e.call(method, path, body)
	if status != http.StatusOK {
		e.t.Fatalf("%s %s: %d %s", method, path, status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s %s: decoding %s: %v", method, path, b, err)
		}
	}
	return b
}

// p40Slice is the body the agent posts for slice 1 of a Tesla P40.
const p40Slice = `{"isolated_device":{"name":"mps-00:06.0-1","host_id":"gpu-1","dev_type":"NVIDIA_MPS",
	"model":"Tesla P40","addr":"00:06.0-1","vendor_device_id":"10de:1b38",
	"device_path":"GPU-76aef7ff-372d-2432-b4b4-beca4d8d3400","numa_node":-1,
	"pcie_info":{"lane_width":16,"throughput":"15.76 GB/s","transfer_rate_per_lane":"8GT/s","version":"3.0"},
	"index":-1,"device_minor":-1,"mps_memory_limit":6144,"mps_memory_total":24576,"mps_thread_percentage":25}}`

func (e *env) seed() (api.Host, api.IsolatedDevice) {
	e.t.Helper()
	var hb api.HostBody
	e.mustCall("POST", "/hosts", `{"host":{"name":"gpu-1","access_ip":"10.0.0.1"}}`, &hb)
	var db api.IsolatedDeviceBody
	e.mustCall("POST", "/isolated_devices", p40Slice, &db)
	return hb.Host, db.IsolatedDevice
}

// The JSON a Cloudpods client reads, byte for byte, with the values that
// change from run to run (ids, timestamps) replaced by placeholders.
func TestEnvelopesGolden(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		h, d := e.seed()
		normalise := func(b []byte) []byte {
			for old, placeholder := range map[string]string{
				d.ID: "DEVICE_ID", h.ID: "HOST_ID",
				d.CreatedAt.Format(wireTimeLayout): "TIMESTAMP", d.UpdatedAt.Format(wireTimeLayout): "TIMESTAMP",
				h.CreatedAt.Format(wireTimeLayout): "TIMESTAMP", h.UpdatedAt.Format(wireTimeLayout): "TIMESTAMP",
			} {
				b = bytes.ReplaceAll(b, []byte(old), []byte(placeholder))
			}
			return b
		}
		tests := []struct{ name, path string }{
			{"device_show", "/isolated_devices/" + d.ID},
			{"device_show_details", "/isolated_devices/" + d.ID + "?details=true"},
			{"device_list", "/isolated_devices?host=gpu-1&details=true"},
			{"host_list", "/hosts"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				got := normalise(e.mustCall("GET", tt.path, "", nil))
				golden.Check(t, tt.name+".golden.json", got)
			})
		}
	})
}

// Every field of api.IsolatedDevice (and api.Host) must be a field of the
// body's input type too, so that a client echoing a device it read sends
// only fields the server reads (unknown ones would be ignored, silently).
func TestDeviceInputCoversAPIFields(t *testing.T) {
	tags := func(typ reflect.Type) []string {
		var out []string
		for _, f := range reflect.VisibleFields(typ) { // an embedded api.DevicePatch's too
			if !f.Anonymous {
				out = append(out, strings.Split(f.Tag.Get("json"), ",")[0])
			}
		}
		return out
	}
	for _, c := range []struct{ api, input reflect.Type }{
		{reflect.TypeFor[api.IsolatedDevice](), reflect.TypeFor[deviceInput]()},
		{reflect.TypeFor[api.Host](), reflect.TypeFor[hostInput]()},
	} {
		in := tags(c.input)
		for _, f := range tags(c.api) {
			if !slices.Contains(in, f) {
				t.Errorf("%s has no field %s of %s", c.input, f, c.api)
			}
		}
	}
}
