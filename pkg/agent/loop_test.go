package agent

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/devsync"
	"yunion.io/x/mps-daemon/pkg/entries"
	"yunion.io/x/mps-daemon/pkg/gpu"
)

// stuckInventory blocks SyncDevices, ignoring its context, until released:
// a call that escapes every timeout.
type stuckInventory struct {
	*recordingInventory
	release chan struct{}
}

func (s *stuckInventory) SyncDevices(ctx context.Context, hostID string, desired []api.IsolatedDevice) (devsync.Result, error) {
	<-s.release
	return s.recordingInventory.SyncDevices(ctx, hostID, desired)
}

// syncBuffer is a log destination tests read while the agent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestStalledLoopFailsReadinessAndStopsTheWatchdog(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	stuck := &stuckInventory{recordingInventory: h.inv, release: make(chan struct{})}
	h.agent.opts.Devices = backend.NewRows(context.Background(), stuck, "", nil)
	h.agent.opts.StallAfter = 300 * time.Millisecond
	h.agent.opts.Watchdog = 20 * time.Millisecond
	h.agent.cfg.Host.ListenAddress = ""
	var logs syncBuffer
	h.agent.log = slog.New(slog.NewTextHandler(&logs, nil))
	n := &recordingNotifier{}
	h.agent.notify = n
	srv := httptest.NewServer(h.agent.Handler())
	defer srv.Close()
	probe := func(path string) (int, string) { return get(t, srv.URL+path) }

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.agent.Run(ctx) }()
	released := false
	defer func() {
		if !released {
			close(stuck.release)
		}
		cancel()
		<-done
	}()

	waitFor(t, "the stall to be seen", func() bool { return h.agent.Status().Loop.Stalled })
	if code, body := probe("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "main loop stalled in reconcile") {
		t.Errorf("/readyz during a stall: %d %q", code, body)
	}
	if code, _ := probe("/healthz"); code != http.StatusServiceUnavailable {
		t.Errorf("/healthz during a stall: %d", code)
	}
	// The watchdog logs right after it marks the stall.
	waitFor(t, "the stall logged", func() bool {
		return strings.Contains(logs.String(), "main loop stalled") && strings.Contains(logs.String(), "step=reconcile")
	})
	pings := func() int { return strings.Count(strings.Join(n.all(), "\n"), "WATCHDOG=1") }
	before := pings()
	time.Sleep(200 * time.Millisecond)
	if after := pings(); after != before {
		t.Errorf("WATCHDOG=1 sent %d times during the stall: systemd would never restart a stuck daemon", after-before)
	}
	if !hasMsg(n.all(), "STATUS=", "main loop stalled in reconcile") {
		t.Errorf("systemd's status line does not show the stall: %q", n.all())
	}
	if !strings.Contains(scrapeAgent(t, srv.URL), `mps_daemon_loop_stalled{Hostname="node-1"} 1`) {
		t.Error("the metric does not show the stall")
	}

	close(stuck.release)
	released = true
	waitFor(t, "ready after the stall", func() bool { code, _ := probe("/readyz"); return code == http.StatusOK })
	if h.agent.Status().Loop.Stalled {
		t.Error("the recovery is not seen in /status")
	}
	waitFor(t, "the recovery logged", func() bool { return strings.Contains(logs.String(), "main loop running again") })
	resumed := pings()
	waitFor(t, "watchdog pings again", func() bool { return pings() > resumed+2 })
}

// A healthy loop that waits is not stalled, however long it waits, and
// pings systemd from beside the loop.
func TestIdleLoopIsNotStalled(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	h.agent.opts.StallAfter = 100 * time.Millisecond
	h.agent.opts.Watchdog = 20 * time.Millisecond
	h.agent.cfg.Host.ListenAddress = ""
	n := &recordingNotifier{}
	h.agent.notify = n
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.agent.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "ready", func() bool { return h.agent.Status().Ready })
	time.Sleep(400 * time.Millisecond) // sync interval 30s: the loop waits
	if st := h.agent.Status(); st.Loop.Stalled || st.Loop.Step != "" {
		t.Errorf("an idle loop reported as %+v", st.Loop)
	}
	if c := strings.Count(strings.Join(n.all(), "\n"), "WATCHDOG=1"); c < 5 {
		t.Errorf("%d watchdog pings in 400ms at 20ms", c)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

// stuckBackend is NVML whose MPS client listing hangs until released: a
// driver call stuck in the kernel.
type stuckBackend struct {
	*fakeBackend
	release chan struct{}
}

func (b stuckBackend) MPSProcesses(ctx context.Context, uuid gpu.UUID) ([]gpu.Process, error) {
	<-b.release
	return b.fakeBackend.MPSProcesses(ctx, uuid)
}

// The accounting loop runs beside the main loop (pkg/acctloop): a pass
// stuck in NVML never holds the main loop up, and is a stall the watchdog
// reports as it reports the main loop's.
func TestAccountingLoopStallIsSeen(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	stuck := stuckBackend{fakeBackend: h.backend, release: make(chan struct{})}
	h.agent.opts.Backend = stuck
	// The accounting's station lists the clients through the stuck NVML.
	h.agent.acct = h.agent.newAccounting(accounting.New(accounting.Options{ProcRoot: h.cfg.Host.ProcRoot, Identities: entries.IdentityStore(h.cfg.Host.StateDirectory).Table}))
	h.agent.opts.StallAfter = 300 * time.Millisecond
	h.agent.opts.Watchdog = 20 * time.Millisecond
	h.agent.cfg.Host.ListenAddress = ""
	var logs syncBuffer
	h.agent.log = slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.agent.Run(ctx) }()
	released := false
	defer func() {
		if !released {
			close(stuck.release)
		}
		cancel()
		<-done
	}()
	waitFor(t, "the accounting stall seen", func() bool {
		st := h.agent.Status()
		return st.Loop.Stalled && st.Loop.Step == "accounting"
	})
	if !h.agent.Status().Ready {
		t.Error("the main loop did not get ready beside a stuck accounting pass")
	}
	waitFor(t, "the stall logged", func() bool { return strings.Contains(logs.String(), "accounting loop stalled") })
	close(stuck.release)
	released = true
	waitFor(t, "the recovery", func() bool { return !h.agent.Status().Loop.Stalled })
	waitFor(t, "the recovery logged", func() bool { return strings.Contains(logs.String(), "accounting loop running again") })
}

// A backend whose holdings changed outside a reconcile (a Kubernetes claim
// prepared) says so (Options.Changed): the loop reconciles at once, so the
// claim's own device is billed and shown from then on, not at the next
// sync interval.
func TestAChangeOfTheBackendReconciles(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	var mu sync.Mutex
	syncs := 0
	h.inv.check = func([]api.IsolatedDevice) error {
		mu.Lock()
		defer mu.Unlock()
		syncs++
		return nil
	}
	synced := func() int { mu.Lock(); defer mu.Unlock(); return syncs }
	changed := make(chan struct{}, 1)
	h.agent.opts.Changed = changed
	h.agent.cfg.Host.ListenAddress = ""
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.agent.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "the first reconcile", func() bool { return h.agent.Status().Ready && synced() == 1 })
	changed <- struct{}{}
	waitFor(t, "a reconcile on the backend's change (the sync interval is 30s)", func() bool { return synced() == 2 })
}
