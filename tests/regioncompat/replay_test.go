package regioncompat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/cloudpods"
	"yunion.io/x/mps-daemon/internal/testsupport/replay"
	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/server"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// The real region's side of TestRealClimcAgainstTheInventory, as recorded
// (tests/cloudpods/recordings/regioncompat): every request climc and the
// test sent the region, in order, is sent to the inventory (on each
// backend), and the inventory must answer as the region did, compared by
// normalise_test.go's rules. This runs in every `make test`; the live test
// needs Cloudpods' binaries (make test-cloudpods).
//
// Besides those rules, what differs between the two on purpose:
//
//   - what only a region keeps is not sent to the inventory: guests
//     (imported and set ready: the inventory keeps none, a guest is its
//     name there), isolated-device models, and reads of a guest;
//   - an attach or detach answers the server in the region and the
//     device rows in the inventory: their statuses are compared, then the
//     rows, through the lists that follow;
//   - after an attach by model, each side picks the free slices it likes:
//     lists are compared by their totals and how many rows each guest
//     holds, until the guest detaches all;
//   - the recorded region ran no scheduler, so it answered a purge 404 "No
//     such service scheduler" after deleting the row: a full region
//     answers 200, as the inventory does.
const compatCassette = "regioncompat/TestRealClimcAgainstTheInventory.json"

// loadCompat is the recorded climc session of compatCassette.
func loadCompat(t *testing.T) *replay.Cassette {
	t.Helper()
	dir, err := cloudpods.Recordings()
	if err != nil {
		t.Fatal(err)
	}
	c, err := replay.Load(filepath.Join(dir, compatCassette))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestInventoryAnswersTheRecordedClimcAsTheRegion(t *testing.T) {
	c := loadCompat(t)
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		walkCassette(t, c, open(), nil)
	})
}

// A change to the wire fails the comparison, naming the field: here the
// inventory's answers with one field renamed (source, every row has it).
func TestARenamedFieldFailsTheComparison(t *testing.T) {
	c := loadCompat(t)
	f := &replay.Failures{TB: t}
	walkCassette(f, c, storetest.Open(t, storetest.Backends()[0].DSN(t)), func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(bytes.ReplaceAll(rec.Body.Bytes(), []byte(`"source":`), []byte(`"sources":`)))
		})
	})
	f.Done()
	for _, want := range []string{
		`GET /isolated_devices?details=false&gpu=false&host=`,
		`field answer.isolated_devices[0].source in the region ("local"), not in the inventory`,
		`field answer.isolated_devices[0].sources in the inventory ("local"), not in the region`,
	} {
		if !strings.Contains(f.All(), want) {
			t.Errorf("the comparison did not say %q:\n%.3000s", want, f.All())
		}
	}
}

// walkCassette sends the cassette's region requests to an inventory on st
// and compares the answers.
func walkCassette(t testing.TB, c *replay.Cassette, st *store.Store, wrap func(http.Handler) http.Handler) {
	var h http.Handler = server.New(st, server.Options{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	token, _, err := st.CreateToken(t.Context(), store.NewToken{Name: "compat-admin", Role: store.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	replayRegion(t, c, srv.URL, http.DefaultClient, token)
}

// replayRegion sends the cassette's region requests to the inventory at
// base with client, authenticated by token as climc is, and compares the
// answers.
func replayRegion(t testing.TB, c *replay.Cassette, base string, client *http.Client, token string) {
	b := replay.NewBindings(base)
	b.Bind(c.Cloud.ZoneID, "default") // the inventory's one zone
	loose, compared := false, 0
	for i, e := range c.Exchanges {
		if e.Service != "region" || regionOnly(e) {
			continue
		}
		what := fmt.Sprintf("#%d %s %s", i, e.Method, b.Fill(e.Path))
		var body []byte
		if len(e.Request) > 0 {
			body = []byte(b.Fill(string(e.Request)))
		}
		status, got := send(t, client, base, token, e.Method, b.Fill(e.Path), body)
		learnID(b, e, got)
		want := []byte(b.Fill(string(e.Response)))
		compared++
		action := strings.HasSuffix(e.Path, "/attach-isolated-device") || strings.HasSuffix(e.Path, "/detach-isolated-device")
		switch {
		case e.Status/100 != 2 || status/100 != 2:
			compareRefusal(t, what, e.Status, want, status, got)
		case action, strings.HasSuffix(e.Path, "/hosts"):
			// the server (region) and the rows (inventory), the host as
			// only a full region keeps it: the statuses only
		case loose && e.Method == http.MethodGet:
			compareCounts(t, what, want, got)
		default:
			compareAnswer(t, what, want, got)
		}
		if action {
			var req struct {
				Server struct {
					Model     string `json:"model"`
					DetachAll bool   `json:"detach_all"`
				} `json:"server"`
			}
			_ = json.Unmarshal(e.Request, &req)
			loose = loose && !req.Server.DetachAll || req.Server.Model != "" && e.Status/100 == 2
		}
	}
	if compared < 100 {
		t.Fatalf("compared %d answers: the cassette lost its exchanges?", compared)
	}
	t.Logf("compared the inventory's answers to %d recorded region requests", compared)
}

// regionOnly: what the inventory does not keep (guests, device models).
func regionOnly(e replay.Exchange) bool {
	p, _, _ := strings.Cut(e.Path, "?")
	switch {
	case strings.HasPrefix(p, "/isolated_device_models"), p == "/servers/import":
		return true
	case strings.HasPrefix(p, "/servers/") && (strings.HasSuffix(p, "/status") || e.Method == http.MethodGet):
		return true
	}
	return false
}

// send sends one request with the admin token as climc does.
func send(t testing.TB, client *http.Client, base, token, method, path string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Auth-Token", token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "yunioncloud-go/201708")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// learnID binds the id a create was answered with in the recording to the
// one the inventory gave.
func learnID(b *replay.Bindings, e replay.Exchange, got []byte) {
	if e.Method != http.MethodPost || e.Status/100 != 2 {
		return
	}
	one := func(raw []byte) string {
		var m map[string]map[string]any
		if json.Unmarshal(raw, &m) != nil {
			return ""
		}
		for _, k := range []string{"host", "isolated_device"} {
			if id, ok := m[k]["id"].(string); ok {
				return id
			}
		}
		return ""
	}
	if p, v := one(e.Response), one(got); p != "" && v != "" {
		b.Bind(p, v)
	}
}

// decode reads an answer for a comparison: times as T, then the declared
// differences (normJSON).
func decode(t testing.TB, what string, raw []byte, region bool) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(timestamp.ReplaceAllString(string(raw), "T")), &v); err != nil {
		t.Fatalf("%s: the answer is not JSON: %v\n%s", what, err, raw)
	}
	return normJSON(v, labels{}, region)
}

func compareAnswer(t testing.TB, what string, want, got []byte) {
	t.Helper()
	w, g := decode(t, what, want, true), decode(t, what, got, false)
	if !reflect.DeepEqual(w, g) {
		wb, _ := json.Marshal(w)
		gb, _ := json.Marshal(g)
		t.Errorf("%s: the inventory answers differently from the region\n%s", what, fieldDiffs(wb, gb))
	}
}

// fieldDiffs names the fields two answers differ in.
func fieldDiffs(want, got []byte) string {
	diffs := replay.DiffJSON(want, got, "in the region", "in the inventory")
	if len(diffs) > 12 {
		diffs = append(diffs[:12], fmt.Sprintf("... %d more", len(diffs)-12))
	}
	return strings.Join(diffs, "\n")
}

// compareCounts compares two lists by total and rows per guest.
func compareCounts(t testing.TB, what string, want, got []byte) {
	t.Helper()
	count := func(raw []byte, region bool) (int, map[string]int) {
		var l struct {
			Total int `json:"total"`
		}
		_ = json.Unmarshal(raw, &l)
		held := map[string]int{}
		if m, ok := decode(t, what, raw, region).(map[string]any); ok {
			rows, _ := m["isolated_devices"].([]any)
			for _, r := range rows {
				if g, ok := r.(map[string]any)["guest"].(string); ok && g != "" {
					held[g]++
				}
			}
		}
		return l.Total, held
	}
	wt, wh := count(want, true)
	gt, gh := count(got, false)
	if wt != gt || !reflect.DeepEqual(wh, gh) {
		t.Errorf("%s: the region lists %d rows, held %v; the inventory %d, held %v", what, wt, wh, gt, gh)
	}
}

// compareRefusal compares error answers by status, class and code, and by
// their words where Cloudpods' host agent reads them (a held device).
func compareRefusal(t testing.TB, what string, wantStatus int, want []byte, status int, got []byte) {
	t.Helper()
	var w, g climcError
	_ = json.Unmarshal(want, &w)
	_ = json.Unmarshal(got, &g)
	if wantStatus == http.StatusNotFound && strings.Contains(w.Details, "No such service scheduler") {
		if status/100 != 2 {
			t.Errorf("%s: a purge the region did (its scheduler absent), the inventory answers %d %s", what, status, got)
		}
		return
	}
	if wantStatus != status || w.Class != g.Class || w.Code != g.Code ||
		w.Details == api.MsgDeviceUsedByServer && g.Details != w.Details {
		t.Errorf("%s: the region answered %d %+v, the inventory %d %s", what, wantStatus, w, status, got)
	}
}
