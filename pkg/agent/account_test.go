package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// signals records what would have been sent; no real process is touched.
type signals struct {
	mu   sync.Mutex
	sent []string
}

func (s *signals) Signal(pid int, sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sig != 0 {
		s.sent = append(s.sent, fmt.Sprintf("%d:%d", pid, sig))
	}
	return nil
}

// addProc makes a process on the host (PID 1's mount namespace, root "/")
// in the harness's fake /proc: started at start (clock ticks), its
// environment naming device ("" names none).
func (h *harness) addProc(t *testing.T, pid int, start uint64, device string) {
	t.Helper()
	h.writeProc(t, pid, 1, start, device, container{root: "/", ns: hostMountNS, cgroup: "0::/user.slice\n"})
}

// writeProc makes process pid, child of ppid, in c's namespace, root and
// cgroup, its environment naming device.
func (h *harness) writeProc(t *testing.T, pid, ppid int, start uint64, device string, c container) {
	t.Helper()
	dir := filepath.Join(h.cfg.Host.ProcRoot, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	env := "PATH=/usr/bin\x00"
	if device != "" {
		env += vdev.EnvVar + "=" + device + "\x00"
	}
	stat := []string{strconv.Itoa(pid), "(python3)", "S", strconv.Itoa(ppid)}
	for range 17 {
		stat = append(stat, "0")
	}
	stat = append(stat, strconv.FormatUint(start, 10), "0")
	for name, content := range map[string]string{"environ": env, "stat": strings.Join(stat, " ") + "\n", "cgroup": c.cgroup} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h.procLink(t, pid, "ns/mnt", c.ns)
	h.procLink(t, pid, "root", c.root)
}

// hostMountNS is the host's mount namespace in the fake /proc (PID 1's).
const hostMountNS = "mnt:[4026531841]"

func (h *harness) procLink(t *testing.T, pid int, file, target string) {
	t.Helper()
	p := filepath.Join(h.cfg.Host.ProcRoot, strconv.Itoa(pid), file)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(p)
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// withFakeProc rebuilds the harness's agent to read a fake /proc and signal
// through killer.
func (h *harness) withFakeProc(t *testing.T, killer accounting.Killer) {
	t.Helper()
	h.cfg.Host.ProcRoot = filepath.Join(h.dir, "proc")
	h.procLink(t, 1, "ns/mnt", hostMountNS)
	var err error
	h.agent, err = New(Options{Config: h.cfg, Backend: h.backend, Runner: h.runner, Devices: backend.NewRows(context.Background(), h.inv, "", nil), SysfsRoot: h.dir + "/nosys", DevRoot: h.dir + "/nodev", Killer: killer})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEnforceTerminatesTheClientThatPushedADeviceOverItsCap(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	killer := &signals{}
	h.withFakeProc(t, killer)
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	g0 := twoGPUs()[0].UUID.String()
	const gib = 1 << 30
	// Device GPU0::0 is capped at h200Memory/4 (35 GiB). Two processes of
	// its container use 20 GiB each: together over; the newer pushed it.
	h.addProc(t, 101, 1000, g0+"::0")
	h.addProc(t, 102, 2000, g0+"::0")
	h.addProc(t, 201, 1500, g0+"::1") // another device, under its cap
	h.addProc(t, 301, 1200, "")       // names no device: reported only
	for _, pid := range []int{101, 102, 201, 301} {
		if _, err := h.runner.AddClient(h.pipeDir(0), pid); err != nil {
			t.Fatal(err)
		}
	}
	h.backend.mu.Lock()
	h.backend.procs = map[gpu.UUID][]gpu.Process{gpu.UUID(g0): {{PID: 101, UsedMemoryBytes: 20 * gib}, {PID: 102, UsedMemoryBytes: 20 * gib}, {PID: 201, UsedMemoryBytes: 20 * gib}, {PID: 301, UsedMemoryBytes: gib}}}
	h.backend.mu.Unlock()

	h.agent.account(ctx)

	ctl := mps.NewController(h.runner, mps.Env{PipeDir: h.pipeDir(0)}, 5e9, nil)
	clients, err := ctl.ClientServers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for pid, wantThere := range map[int]bool{101: true, 102: false, 201: true, 301: true} {
		if _, there := clients[pid]; there != wantThere {
			t.Errorf("client %d connected=%v after enforcement, want %v", pid, there, wantThere)
		}
	}
	all := h.agent.Status()
	st := all.Accounting
	if st == nil || st.Policy != "enforce" {
		t.Fatalf("accounting status: %+v", st)
	}
	dev0 := deviceOf(all, g0+"::0")
	if dev0 == nil || !dev0.OverCap || dev0.UsedBytes != 40*gib || dev0.LastStep != accounting.StepTerminateClient {
		t.Errorf("device %s::0 status: %+v", g0, dev0)
	}
	if len(st.Unknown) != 1 || st.Unknown[0].PID != 301 {
		t.Errorf("pid 301 names no device and should be reported: %+v", st.Unknown)
	}
	if len(killer.sent) != 0 {
		t.Errorf("no signal before the grace period: %v", killer.sent)
	}
}

func TestReportPolicyTerminatesNothing(t *testing.T) {
	h := newHarness(t, "mps_accounting: report\n", fourAndTwo)
	killer := &signals{}
	h.withFakeProc(t, killer)
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	g0 := twoGPUs()[0].UUID.String()
	h.addProc(t, 101, 1000, g0+"::0")
	h.addProc(t, 102, 2000, g0+"::0")
	for _, pid := range []int{101, 102} {
		if _, err := h.runner.AddClient(h.pipeDir(0), pid); err != nil {
			t.Fatal(err)
		}
	}
	h.backend.procs = map[gpu.UUID][]gpu.Process{gpu.UUID(g0): {{PID: 101, UsedMemoryBytes: 30 << 30}, {PID: 102, UsedMemoryBytes: 30 << 30}}}
	h.agent.account(ctx)
	clients, _ := mps.NewController(h.runner, mps.Env{PipeDir: h.pipeDir(0)}, 5e9, nil).ClientServers(ctx)
	if len(clients) != 2 {
		t.Errorf("report must not terminate anyone: clients %v", clients)
	}
	if d := deviceOf(h.agent.Status(), g0+"::0"); d == nil || !d.OverCap {
		t.Errorf("the over-cap device should be reported: %+v", d)
	}
	if len(killer.sent) != 0 {
		t.Errorf("report must not signal: %v", killer.sent)
	}
}

// device finds a virtual device of the status by name.
func deviceOf(s status.Status, name string) *status.Device {
	for i := range s.Devices {
		if s.Devices[i].Name == name {
			return &s.Devices[i]
		}
	}
	return nil
}
