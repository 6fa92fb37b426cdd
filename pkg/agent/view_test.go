package agent

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/entries"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
	"yunion.io/x/mps-daemon/pkg/view"
)

// installLibrary puts a file where the harness's mps_view_library points
// (the daemon mounts it; it never reads it).
func (h *harness) installLibrary(t *testing.T) {
	t.Helper()
	lib := h.cfg.Host.ViewLibrary
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, []byte("\x7fELF"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// viewOf is what a device's view file says, as the library would read it;
// ok false when it has none.
func (h *harness) viewOf(t *testing.T, name string) (view.Memory, bool) {
	t.Helper()
	dir, err := entries.ViewStore(h.cfg.Host.StateDirectory).Path(vdev.Name(name))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, view.MemoryFile))
	if err != nil {
		return view.Memory{}, false
	}
	m, err := view.Parse(b)
	if err != nil {
		t.Fatalf("%s's view: %v", name, err)
	}
	return m, true
}

// withMaps gives a fake process a memory map, with the view's library
// loaded or not.
func (h *harness) withMaps(t *testing.T, pid int, loaded bool) {
	t.Helper()
	maps := "55d0c0a00000-55d0c0a28000 r--p 00000000 08:01 1048 /usr/bin/python3.12\n"
	if loaded {
		maps += "7f1a2d000000-7f1a2d004000 r-xp 00001000 00:2e 3 /run/yunion-mps/lib/libyunion-mps-view.so\n"
	}
	if err := os.WriteFile(filepath.Join(h.cfg.Host.ProcRoot, strconv.Itoa(pid), "maps"), []byte(maps), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Each device's containers get its view: the spec mounts it, its file
// says the device's cap and, after each accounting pass, what its
// processes use; a resize changes the cap a new query reads; the view of
// a device that left the plan goes, a held one's stays; a client without
// the library is reported and left alone.
func TestEachDeviceHasItsViewThroughResizesAndAccounting(t *testing.T) {
	h := newHarness(t, "mps_accounting: enforce\n", fourAndTwo)
	killer := &signals{}
	h.withFakeProc(t, killer)
	h.installLibrary(t)
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	g0, g1 := twoGPUs()[0].UUID.String(), twoGPUs()[1].UUID.String()
	st := h.agent.Status()
	if st.View == nil || st.View.State != status.ViewOn || st.View.Devices != 6 || st.View.Library != h.cfg.Host.ViewLibrary {
		t.Fatalf("view status %+v; want on, 6 devices", st.View)
	}
	spec := h.cdiSpec(t)
	for i := range 4 {
		name := g0 + "::" + strconv.Itoa(i)
		m, ok := h.viewOf(t, name)
		if !ok || m != (view.Memory{Total: (h200Memory / 4).Bytes()}) {
			t.Errorf("%s's view: %+v %v; want its cap, nothing used", name, m, ok)
		}
		dir, _ := entries.ViewStore(h.cfg.Host.StateDirectory).Path(vdev.Name(name))
		if !strings.Contains(spec, "hostPath: "+dir+"\n") {
			t.Errorf("the spec does not mount %s", dir)
		}
	}
	if !strings.Contains(spec, "hostPath: "+h.cfg.Host.ViewLibrary+"\n") || !strings.Contains(spec, "containerPath: /etc/ld.so.preload") {
		t.Error("the spec lacks the library or the preload list")
	}

	// Two clients of g0::1, one with the library loaded; the accounting
	// writes their sum into the device's view, and reports the other.
	const gib = 1 << 30
	h.addProc(t, 101, 1000, g0+"::1")
	h.withMaps(t, 101, true)
	h.addProc(t, 102, 1100, g0+"::1")
	h.withMaps(t, 102, false)
	for _, pid := range []int{101, 102} {
		if _, err := h.runner.AddClient(h.pipeDir(0), pid); err != nil {
			t.Fatal(err)
		}
	}
	setProcs := func(used map[int]uint64) {
		h.backend.mu.Lock()
		defer h.backend.mu.Unlock()
		var ps []gpu.Process
		for _, pid := range []int{101, 102} {
			if u, ok := used[pid]; ok {
				ps = append(ps, gpu.Process{PID: pid, UsedMemoryBytes: u})
			}
		}
		h.backend.procs = map[gpu.UUID][]gpu.Process{gpu.UUID(g0): ps}
	}
	setProcs(map[int]uint64{101: 3 * gib, 102: 2 * gib})
	h.agent.account(ctx)
	if m, _ := h.viewOf(t, g0+"::1"); m.Used != 5*gib {
		t.Errorf("after accounting %s's view says %+v; want 5 GiB used", g0+"::1", m)
	}
	if m, _ := h.viewOf(t, g0+"::0"); m.Used != 0 {
		t.Errorf("an idle device's view says %+v", m)
	}
	st = h.agent.Status()
	if d := deviceOf(st, g0+"::1"); d == nil || d.WithoutView != 1 || d.Clients != 2 {
		t.Errorf("device status %+v; want 1 of its 2 clients without the view", d)
	}
	if w := st.Accounting.WithoutView; len(w) != 1 || w[0].PID != 102 || w[0].Device != g0+"::1" {
		t.Errorf("clients without the view: %+v", w)
	}
	if len(killer.sent) != 0 {
		t.Errorf("a client without the view was signalled: %v", killer.sent)
	}
	setProcs(map[int]uint64{101: 3 * gib})
	h.agent.account(ctx)
	if m, _ := h.viewOf(t, g0+"::1"); m.Used != 3*gib {
		t.Errorf("after one exited the view says %+v", m)
	}

	// g1::1 is held; then g0 is split in 2 and g1 leaves the plan: g0's
	// caps double, its two last devices' views go, g1::1's stays (held),
	// g1::0's goes.
	held := h.byAddr()["db:00.0-1"]
	if _, err := h.inv.AttachIsolatedDevice(ctx, "pod-a", held.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	h.agent.cfg.Devices = mustDevices(t, h.dir, strings.Replace(onlyGPU0, "virtual_number: 4", "virtual_number: 2", 1))
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if m, _ := h.viewOf(t, g0+"::1"); m != (view.Memory{Total: (h200Memory / 2).Bytes(), Used: 3 * gib}) {
		t.Errorf("after the resize %s's view says %+v; want the new cap and the use it had", g0+"::1", m)
	}
	for name, want := range map[string]bool{g0 + "::2": false, g0 + "::3": false, g1 + "::0": false, g1 + "::1": true} {
		if _, ok := h.viewOf(t, name); ok != want {
			t.Errorf("%s has a view: %v, want %v", name, ok, want)
		}
	}
	if m, _ := h.viewOf(t, g1+"::1"); m.Total != (h200Memory / 2).Bytes() {
		t.Errorf("the held device's view: %+v", m)
	}
}

// A host without the library starts and serves its devices without the
// view, says so in the status and once in the log; once the library is
// there the next reconcile gives containers the view. With the key empty
// the spec is the one without the view and nothing is written.
func TestTheViewWaitsForItsLibrary(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	var logs bytes.Buffer
	h.logTo(t, &logs)
	ctx := context.Background()
	for range 2 {
		if err := h.agent.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st := h.agent.Status()
	if !st.Ready || st.View == nil || st.View.State != status.ViewMissing || !strings.Contains(st.View.Reason, "does not exist") {
		t.Fatalf("ready %v, view %+v; want ready with the view missing", st.Ready, st.View)
	}
	if n := strings.Count(logs.String(), "the view's library is missing"); n != 1 {
		t.Errorf("the missing library logged %d times over two reconciles, want once:\n%s", n, logs.String())
	}
	missing := h.cdiSpec(t)
	if strings.Contains(missing, "ld.so.preload") || strings.Contains(missing, "/run/yunion-mps/view") {
		t.Errorf("the spec mounts the view without its library:\n%s", missing)
	}

	h.installLibrary(t)
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if st := h.agent.Status(); st.View.State != status.ViewOn || !strings.Contains(h.cdiSpec(t), "containerPath: /etc/ld.so.preload") {
		t.Errorf("with the library: view %+v", st.View)
	}

	h.agent.cfg.Host.ViewLibrary = ""
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if st := h.agent.Status(); st.View.State != status.ViewOff || h.cdiSpec(t) != missing {
		t.Errorf("off: view %+v; the spec differs from the one without the view", st.View)
	}
	// A view's use is not written while it is off.
	h.agent.acct.WriteViewUsage(h.agent.accountInputs(), accountingReportOf(map[string]units.Bytes{twoGPUs()[0].UUID.String() + "::0": 7}))
	if m, _ := h.viewOf(t, twoGPUs()[0].UUID.String()+"::0"); m.Used != 0 {
		t.Errorf("off, the view was written: %+v", m)
	}
}

// accountingReportOf is an accounting pass that measured these devices.
func accountingReportOf(used map[string]units.Bytes) accounting.Report {
	r := accounting.Report{Usage: accounting.Usage{PerDevice: map[string]accounting.DeviceUsage{}}}
	for n, u := range used {
		r.Usage.PerDevice[n] = accounting.DeviceUsage{UsedBytes: uint64(u)}
	}
	return r
}

// check-config says whether containers will get the view; a missing
// library is no error.
func TestCheckConfigSaysWhetherContainersGetTheView(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	h.writeConfig(t, fourAndTwo)
	for _, tc := range []struct {
		install bool
		extra   string
		want    string
	}{
		{false, "", "view:      MISSING, the devices are served without it: " + h.cfg.Host.ViewLibrary + " does not exist"},
		{true, "", "view:      " + h.cfg.Host.ViewLibrary + ": containers see their device's cap"},
	} {
		if tc.install {
			h.installLibrary(t)
		}
		var out strings.Builder
		if err := CheckConfig(context.Background(), &out, h.loadWith(t, tc.extra), ModeCloudpods, h.backend, h.dir+"/nosys", h.dir+"/nodev"); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("check-config printed\n%s\nwant a line %q", out.String(), tc.want)
		}
	}
}
