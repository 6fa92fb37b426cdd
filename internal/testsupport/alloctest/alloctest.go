// Package alloctest is the proof that allocation is safe under
// concurrency, shared by the server's tests (httptest servers over real
// stores) and the end-to-end tests (mps-inventory processes): hundreds of
// concurrent attach and detach requests at real servers over loopback,
// whose answers are then checked against each other and against the final
// state.
//
// What the answers must show:
//
//   - no device is answered as attached to a guest while another guest that
//     got it before has not started releasing it (compared on a global event
//     counter taken before each request and after each answer);
//   - a successful count-k attach answers k distinct devices, all held by
//     its guest; a refused one (400: held, too few free; 409: contention)
//     attaches nothing (checked by the final
//     state, and by detach-all, which must answer exactly what the guest
//     holds);
//   - at the end every device is held by exactly the guest the answers say.
//
// Each guest is driven by one worker, so a guest's requests are sequential
// and its holdings known exactly; the guests compete for the devices of one
// (host, model). A host-sync-like writer flips `unhealthy` on devices
// through PUT meanwhile: its updates must never undo an attach or a detach.
package alloctest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"yunion.io/x/mps-daemon/pkg/api"
)

// Load describes one run.
type Load struct {
	// URLs are the API roots of the servers; each request goes to one at
	// random (several servers on one database, as a cluster runs them).
	URLs []string
	// Token is an admin token.
	Token string
	// Devices are the rows competed for, all of Model on Host, on NUMA
	// nodes 0 and 1; each request may name one by id.
	Devices     []api.IsolatedDevice
	Host, Model string
	// Workers run at once, each driving Rounds guests in turn.
	Workers, Rounds int
}

// Run fires the requests, then, if every worker finished without an error,
// reads the final state (device id -> guest id, "" when free) with final
// and checks everything. Failures are reported on t.
func Run(t testing.TB, l Load, final func() (map[string]string, error)) {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * l.Workers}
	defer tr.CloseIdleConnections()
	r := &race{
		t: t, load: l, http: &http.Client{Transport: tr},
		tenure: map[string][]*holding{}, holds: map[string]map[string]bool{}, stats: map[string]int{},
	}
	if !r.run(l.Workers, l.Rounds) {
		return
	}
	state, err := final()
	if err != nil {
		t.Fatalf("reading the final state: %v", err)
	}
	r.check(state)
}

// holding is one guest's tenure of one device, in event numbers.
type holding struct {
	guest                 string
	attachStart, attachAt int64 // request sent, answer received
	detachStart           int64 // 0 while held
}

type race struct {
	t      testing.TB
	load   Load
	http   *http.Client
	clock  atomic.Int64
	mu     sync.Mutex
	tenure map[string][]*holding // device id -> holdings
	// holds is what each guest holds according to the answers.
	holds map[string]map[string]bool
	// stats counts answers by kind, for the log.
	stats map[string]int
}

// post sends one request to a random server and returns the status, the
// devices answered and the event numbers around it. A refusal (a device held
// by another guest or too few free, 400; contention, 409) is answered as
// statusRefused; any other error answer is an error.
func (r *race) post(ctx context.Context, path, body string) (status int, devs []api.IsolatedDevice, start, end int64, err error) {
	url := r.load.URLs[rand.N(len(r.load.URLs))] + path
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader([]byte(body)))
	if err != nil {
		return 0, nil, 0, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+r.load.Token)
	req.Header.Set("Content-Type", "application/json")
	start = r.clock.Add(1)
	resp, err := r.http.Do(req)
	if err != nil {
		return 0, nil, 0, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	end = r.clock.Add(1)
	if err != nil {
		return 0, nil, 0, 0, err
	}
	if resp.StatusCode == http.StatusOK {
		var lb api.IsolatedDevicesBody
		if err := json.Unmarshal(b, &lb); err != nil {
			return 0, nil, 0, 0, fmt.Errorf("decoding %s: %w", b, err)
		}
		devs = lb.IsolatedDevices
	} else if refusal(resp.StatusCode, b) {
		if resp.StatusCode == http.StatusConflict {
			r.count("refused for contention")
		}
		return statusRefused, nil, start, end, nil
	} else {
		return 0, nil, 0, 0, fmt.Errorf("POST %s %s: %d %s", path, body, resp.StatusCode, b)
	}
	return resp.StatusCode, devs, start, end, nil
}

// statusRefused is what post answers for a refusal.
const statusRefused = -1

// refusal reports whether an error answer is one of the refusals a request
// may meet in the race, in Cloudpods' classes: the device is held by another
// guest (400 BadRequestError), too few are free or the device is unhealthy
// (400 InsufficientResourceError), or the rows kept changing (409
// ConflictError, "contention").
func refusal(status int, b []byte) bool {
	var ae api.Error
	if json.Unmarshal(b, &ae) != nil || ae.Code != status {
		return false
	}
	switch status {
	case http.StatusBadRequest:
		return ae.Class == api.ClassBadRequest || ae.Class == api.ClassInsufficientResource
	case http.StatusConflict:
		return ae.Class == api.ClassConflict && strings.Contains(ae.Details, "contention")
	}
	return false
}

func (r *race) count(kind string) {
	r.mu.Lock()
	r.stats[kind]++
	r.mu.Unlock()
}

// attached records an attach answer of guest.
func (r *race) attached(guest string, devs []api.IsolatedDevice, start, end int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	held := r.holds[guest]
	if held == nil {
		held = map[string]bool{}
		r.holds[guest] = held
	}
	for _, d := range devs {
		if d.GuestID != guest {
			return fmt.Errorf("attach for %s answered %s with guest_id %q", guest, d.ID, d.GuestID)
		}
		if held[d.ID] {
			continue // by id, already held: answered again, same tenure
		}
		held[d.ID] = true
		r.tenure[d.ID] = append(r.tenure[d.ID], &holding{guest: guest, attachStart: start, attachAt: end})
	}
	return nil
}

// detached records a detach answer of guest; want is what it had to answer.
func (r *race) detached(guest string, devs []api.IsolatedDevice, want []string, start int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := make([]string, len(devs))
	for i, d := range devs {
		got[i] = d.ID
		if d.GuestID != "" {
			return fmt.Errorf("detach for %s answered %s with guest_id %q", guest, d.ID, d.GuestID)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return fmt.Errorf("detach for %s answered %q, but it held %q", guest, got, want)
	}
	for _, id := range got {
		// Answers are recorded in whatever order their goroutines get the
		// lock, not in event order: find the guest's open tenure.
		i := slices.IndexFunc(r.tenure[id], func(h *holding) bool { return h.guest == guest && h.detachStart == 0 })
		if i < 0 {
			return fmt.Errorf("device %s detached from %s, which does not hold it", id, guest)
		}
		r.tenure[id][i].detachStart = start
		delete(r.holds[guest], id)
	}
	return nil
}

func (r *race) held(guest string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Collect(maps.Keys(r.holds[guest]))
}

// run starts workers, each driving rounds guests in turn: every guest
// attaches once or twice (by model, 1 to 3 devices, sometimes on one NUMA
// node; or a random device by id), then releases them all (one by id and
// the rest with all, or all at once), except the last guest of each worker,
// which keeps them or releases one, so the final state has holders.
// It reports whether every worker finished without an error (the checks of
// the end state mean nothing after one gave up in the middle).
func (r *race) run(workers, rounds int) bool {
	ctx, cancel := context.WithCancel(r.t.Context())
	defer cancel()
	errs := make(chan error, workers+1)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for round := range rounds {
				if err := r.guest(ctx, fmt.Sprintf("pod-%d-%d", w, round), round == rounds-1); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		})
	}
	// The host's side: PUTs of unhealthy, as a sync reporting MPS health.
	syncDone := make(chan struct{})
	go func() {
		defer close(syncDone)
		for i := 0; ctx.Err() == nil; i++ {
			d := r.load.Devices[rand.N(len(r.load.Devices))]
			body := fmt.Sprintf(`{"isolated_device":{"unhealthy":%t}}`, i%2 == 0)
			req, _ := http.NewRequestWithContext(ctx, "PUT", r.load.URLs[i%len(r.load.URLs)]+"/isolated_devices/"+d.ID, bytes.NewReader([]byte(body)))
			req.Header.Set("Authorization", "Bearer "+r.load.Token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := r.http.Do(req)
			if err != nil {
				return // cancelled at the end
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				r.count("sync PUT")
			case http.StatusConflict: // contention: the sync would retry
				r.count("sync PUT refused")
			default:
				errs <- fmt.Errorf("PUT unhealthy of %s: %d", d.ID, resp.StatusCode)
				return
			}
		}
	}()
	wg.Wait()
	cancel()
	<-syncDone
	close(errs)
	ok := true
	for err := range errs {
		r.t.Error(err)
		ok = false
	}
	return ok
}

func (r *race) guest(ctx context.Context, guest string, last bool) error {
	for range 1 + rand.N(2) {
		if err := r.attach(ctx, guest); err != nil {
			return err
		}
	}
	held := r.held(guest)
	if len(held) == 0 {
		return nil
	}
	switch n := rand.N(2); {
	case last && n == 0:
		r.count("keep")
		return nil
	case last || n == 0:
		if err := r.detachOne(ctx, guest, held[rand.N(len(held))]); err != nil || last {
			return err
		}
	}
	status, devs, start, _, err := r.post(ctx, "/servers/"+guest+"/detach-isolated-device", `{"all":true}`)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("detach all of %s refused", guest)
	}
	r.count("detach all")
	return r.detached(guest, devs, r.held(guest), start)
}

// attach sends one attach of guest: a random device by id, or 1 to 3
// devices by model, sometimes on one NUMA node.
func (r *race) attach(ctx context.Context, guest string) error {
	var body string
	count := 1
	switch n := rand.N(10); {
	case n < 3:
		body = fmt.Sprintf(`{"device":%q}`, r.load.Devices[rand.N(len(r.load.Devices))].ID)
	case n < 5:
		count = 1 + rand.N(3)
		body = fmt.Sprintf(`{"model":%q,"host":%q,"count":%d,"numa_node":%d}`, r.load.Model, r.load.Host, count, rand.N(2))
	default:
		count = 1 + rand.N(3)
		body = fmt.Sprintf(`{"dev_type":"NVIDIA_MPS","model":%q,"host":%q,"count":%d}`, r.load.Model, r.load.Host, count)
	}
	status, devs, start, end, err := r.post(ctx, "/servers/"+guest+"/attach-isolated-device", body)
	if err != nil {
		return err
	}
	r.count("attach request")
	if status == statusRefused {
		r.count("attach refused")
		return nil
	}
	r.count("attach")
	ids := make(map[string]bool)
	for _, d := range devs {
		ids[d.ID] = true
	}
	if len(devs) != count || len(ids) != count {
		return fmt.Errorf("attach %s for %s answered %d devices (%d distinct), want %d", body, guest, len(devs), len(ids), count)
	}
	return r.attached(guest, devs, start, end)
}

func (r *race) detachOne(ctx context.Context, guest, id string) error {
	status, devs, start, _, err := r.post(ctx, "/servers/"+guest+"/detach-isolated-device", fmt.Sprintf(`{"device":%q}`, id))
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("detach of %s by its holder %s refused", id, guest)
	}
	r.count("detach")
	return r.detached(guest, devs, []string{id}, start)
}

// check compares the tenures pairwise, and the final state with the
// answers.
func (r *race) check(final map[string]string) {
	t := r.t
	for id, hs := range r.tenure {
		for i, a := range hs {
			for _, b := range hs[i+1:] {
				aFirst := a.detachStart != 0 && a.detachStart < b.attachAt
				bFirst := b.detachStart != 0 && b.detachStart < a.attachAt
				if !aFirst && !bFirst {
					t.Errorf("device %s held by %s %+v and %s %+v at once", id, a.guest, *a, b.guest, *b)
				}
			}
		}
	}
	want := map[string]string{}
	for _, d := range r.load.Devices {
		want[d.ID] = ""
	}
	for guest, held := range r.holds {
		for id := range held {
			want[id] = guest
		}
	}
	if len(final) != len(want) {
		t.Errorf("%d devices at the end, want %d", len(final), len(want))
	}
	for id, g := range want {
		if got, ok := final[id]; !ok || got != g {
			t.Errorf("device %s: guest %q at the end (present: %t), the answers say %q", id, got, ok, g)
		}
	}
	t.Logf("answers: %v", r.stats)
	if r.stats["attach request"] < 300 || r.stats["attach"] < 100 {
		t.Errorf("%d attach requests, %d successful: the test did not exercise enough", r.stats["attach request"], r.stats["attach"])
	}
}
