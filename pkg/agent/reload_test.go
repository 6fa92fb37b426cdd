package agent

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/statusview"
)

// reloadHarness runs the agent on files, reloading by hand.
func reloadHarness(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t, "", fourAndTwo)
	h.writeConfig(t, fourAndTwo)
	cfg, err := LoadConfig(h.agent.opts.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host.ReloadHoldTime = 300 * time.Millisecond // below the bound a file may set; keeps the test short
	h.agent.cfg = cfg
	if err := h.agent.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(h.devices()); n != 6 {
		t.Fatalf("%d devices, want 6", n)
	}
	return h
}

func (h *harness) hostConfPath() string { return filepath.Join(h.dir, "host.conf") }

func TestTruncatedHostConfIsHeldBackUntilItSettles(t *testing.T) {
	h := reloadHarness(t)
	ctx := context.Background()
	good, err := os.ReadFile(h.hostConfPath())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.hostConfPath(), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if h.agent.reload(ctx, "test") {
		t.Fatal("a 0-byte host.conf was applied at once")
	}
	st := h.agent.Status()
	if st.ConfigHeld == nil || !strings.Contains(st.ConfigHeld.Reason, "remove all 6 virtual devices") {
		t.Fatalf("status does not show the held change: %+v", st.ConfigHeld)
	}
	if !strings.Contains(h.agent.statusLine(), "config change held back until") {
		t.Errorf("systemd's status line does not say so: %q", h.agent.statusLine())
	}
	srv := httptest.NewServer(h.agent.Handler())
	defer srv.Close()
	if !strings.Contains(scrapeAgent(t, srv.URL), `mps_daemon_config_held{Hostname="node-1"} 1`) {
		t.Error("the metric does not say so")
	}

	// Restored within the hold: nothing happened, nothing is held.
	if err := os.WriteFile(h.hostConfPath(), good, 0o644); err != nil {
		t.Fatal(err)
	}
	if h.agent.reload(ctx, "test") {
		t.Error("the restored file counts as a new configuration")
	}
	if st := h.agent.Status(); st.ConfigHeld != nil || st.ConfigGeneration != 1 {
		t.Errorf("after restoring: held %+v, generation %d", st.ConfigHeld, st.ConfigGeneration)
	}

	// Truncated and left so: applied once it has been so for the hold time.
	if err := os.WriteFile(h.hostConfPath(), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if h.agent.reload(ctx, "test") {
		t.Fatal("applied at once")
	}
	due, ok := h.agent.heldDue()
	if !ok {
		t.Fatal("nothing due")
	}
	if h.agent.reload(ctx, "test") {
		t.Fatal("applied before the hold time")
	}
	time.Sleep(time.Until(due) + 10*time.Millisecond)
	if !h.agent.reload(ctx, "held change settled") {
		t.Fatal("not applied after the files stayed unchanged for the hold time")
	}
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(h.devices()); n != 0 {
		t.Errorf("%d devices after sharing was turned off", n)
	}
	if h.agent.Status().ConfigHeld != nil {
		t.Error("an applied change is still shown as held")
	}
}

func TestEmptiedDeviceYAMLIsHeldBack(t *testing.T) {
	h := reloadHarness(t)
	ctx := context.Background()
	devices := h.agent.config().Host.ContainerDeviceConfigFile
	writeAtomic(t, devices, "")
	if h.agent.reload(ctx, "test") {
		t.Fatal("an empty device YAML was applied at once")
	}
	if st := h.agent.Status(); st.ConfigHeld == nil || !strings.Contains(st.ConfigHeld.Reason, "fall back to cuda_mps_replicas") {
		t.Fatalf("held: %+v", st.ConfigHeld)
	}
	// Another risky content restarts the hold: it has not settled.
	writeAtomic(t, devices, "# emptied\n")
	first := h.agent.held.Since
	if h.agent.reload(ctx, "test") || !h.agent.held.Since.After(first) {
		t.Error("a different held content keeps the old hold time")
	}
	// A good edit replaces the held one at once.
	writeAtomic(t, devices, yamlFor(2, 2))
	if !h.agent.reload(ctx, "test") {
		t.Fatal("a good edit after a held one was not applied")
	}
	if st := h.agent.Status(); st.ConfigHeld != nil {
		t.Errorf("still held: %+v", st.ConfigHeld)
	}
}

func TestReloadOfUnchangedFilesChangesNothing(t *testing.T) {
	h := reloadHarness(t)
	ctx := context.Background()
	if h.agent.reload(ctx, "SIGHUP") {
		t.Error("unchanged files count as a new configuration")
	}
	devices := h.agent.config().Host.ContainerDeviceConfigFile
	writeAtomic(t, devices, "devices: [\n")
	if h.agent.reload(ctx, "test") || h.agent.Status().ConfigError == "" {
		t.Fatal("a broken file was not rejected")
	}
	writeAtomic(t, devices, fourAndTwo)
	if h.agent.reload(ctx, "test") {
		t.Error("the files back as in force count as a new configuration")
	}
	if st := h.agent.Status(); st.ConfigError != "" || st.ConfigGeneration != 1 {
		t.Errorf("after putting the files back: error %q, generation %d", st.ConfigError, st.ConfigGeneration)
	}
}

func TestRestartOnlyChangeIsShownUntilUndone(t *testing.T) {
	h := reloadHarness(t)
	ctx := context.Background()
	good, err := os.ReadFile(h.hostConfPath())
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(good), "mps_listen_address: 127.0.0.1:0", "mps_listen_address: 127.0.0.1:1", 1) + "mps_control_timeout: 20s\n"
	if err := os.WriteFile(h.hostConfPath(), []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	h.agent.reload(ctx, "test")
	st := h.agent.Status()
	if !slices.Equal(st.RestartPending, []string{"mps_listen_address", "mps_control_timeout"}) {
		t.Errorf("restart_pending %v", st.RestartPending)
	}
	if h.agent.config().Host.ListenAddress != "127.0.0.1:0" {
		t.Error("a restart-only key changed under the running daemon")
	}
	if !strings.Contains(h.agent.statusLine(), "restart to apply mps_listen_address,mps_control_timeout") {
		t.Errorf("status line %q", h.agent.statusLine())
	}
	if err := os.WriteFile(h.hostConfPath(), good, 0o644); err != nil {
		t.Fatal(err)
	}
	h.agent.reload(ctx, "test")
	if st := h.agent.Status(); len(st.RestartPending) != 0 {
		t.Errorf("restart_pending after undoing: %v", st.RestartPending)
	}
}

// `mps-daemon status` says what the daemon holds back and waits for.
func TestStatusViewShowsHeldPendingAndStalled(t *testing.T) {
	now := time.Date(2026, 11, 23, 14, 2, 37, 0, time.Local)
	since := now.Add(-95 * time.Second)
	st := status.Status{
		ConfigGeneration: 3,
		ConfigHeld:       &status.Held{Reason: "it would remove all 32 virtual devices of the host", Since: now, ApplyAt: now.Add(30 * time.Second)},
		RestartPending:   []string{"mps_listen_address"},
		Loop:             status.Loop{Step: "reconcile", Since: &since, Stalled: true},
	}
	var b strings.Builder
	if err := statusview.Write(&b, st, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"held back:      a change of the files, applied at 14:03:07 if they stay as they are: it would remove all 32 virtual devices of the host",
		"needs restart:  mps_listen_address changed on disk; the running values stay until a restart",
		"main loop:      STALLED: main loop stalled in reconcile for 1m35s",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
}
