package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/clientreport"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// The accounting's connect path (issue 39), with real processes: each
// client is a real child (cat, waiting on its stdin) started with the
// environment a container given the device would have, with the escape
// under test; the simulated MPS client connects it (mpssim.Connect), which
// writes its control daemon's NEW CLIENT lines; the agent runs its loops
// with the health tick and the sync ten minutes and more away, and NVML
// lists none of the escaping clients: only the connect path can stop
// them, before they have allocated anything.

// connectTick keeps the health tick's pass out of these tests.
const connectTick = "mps_health_interval: 10m\nmps_sync_interval: 1h\n"

// runLoops runs h's agent (Run) until the test ends; it returns once the
// agent is ready and follows every control daemon's log.
func (h *harness) runLoops(t *testing.T) {
	t.Helper()
	h.agent.cfg.Host.ListenAddress = ""
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.agent.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	waitFor(t, "ready", func() bool { return h.agent.Status().Ready })
	waitFor(t, "the control logs followed", func() bool {
		nc := newClients(h.agent.Status())
		if nc == nil || len(nc.Logs) == 0 {
			return false
		}
		for _, l := range nc.Logs {
			if !l.Following {
				return false
			}
		}
		return true
	})
}

func newClients(s status.Status) *status.NewClients {
	if s.Accounting == nil {
		return nil
	}
	return s.Accounting.NewClients
}

// child is a real process standing for a CUDA client.
type child struct {
	cmd     *exec.Cmd
	environ []string
	done    chan struct{}
	state   *os.ProcessState
}

// startChild starts cat with environ and returns once it runs (its
// /proc/<pid>/environ laid out: it echoed a line), reaped when it ends.
func startChild(t *testing.T, environ []string) *child {
	t.Helper()
	c := &child{cmd: exec.Command("cat"), environ: environ, done: make(chan struct{})}
	c.cmd.Env = environ
	in, err := c.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		in.Close()
		<-c.done
	})
	if _, err := io.WriteString(in, "running\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "running\n" {
		t.Fatalf("cat never echoed: %q, %v", line, err)
	}
	go func() {
		_ = c.cmd.Wait()
		c.state = c.cmd.ProcessState
		close(c.done)
	}()
	return c
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// killed waits until the child ends and reports whether SIGKILL ended it.
func (c *child) killed(t *testing.T) bool {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("PID %d never ended", c.pid())
	}
	ws, ok := c.state.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func (c *child) alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// connect connects the child to MPS as the CUDA driver does in cuInit.
func (h *harness) connect(t *testing.T, c *child) {
	t.Helper()
	if _, err := h.runner.Connect(c.pid(), c.environ); err != nil {
		t.Fatalf("simulated CUDA client %d: %v", c.pid(), err)
	}
}

// envWith is a device's CDI environment, with extra entries set over its
// own ("NAME=" alone drops the variable).
func envWith(base []string, extra ...string) []string {
	out := slices.Clone(base)
	for _, e := range extra {
		name, _, _ := strings.Cut(e, "=")
		out = slices.DeleteFunc(out, func(x string) bool { return strings.HasPrefix(x, name+"=") })
		if !strings.HasSuffix(e, "=") {
			out = append(out, e)
		}
	}
	return append(out, "PATH="+os.Getenv("PATH"))
}

// termination is the status's termination of pid, if any.
func termination(s status.Status, pid int) (status.Termination, bool) {
	if s.Accounting == nil {
		return status.Termination{}, false
	}
	for _, t := range s.Accounting.Terminations {
		if t.PID == pid {
			return t, true
		}
	}
	return status.Termination{}, false
}

// escapeForms are the environments that escape a device's memory limit,
// given its cap and another GPU's UUID; "dropped" is an escape only where
// the control daemon holds more than the device's cap.
func escapeForms(capMiB int, other gpu.UUID) map[string]string {
	c := strconv.Itoa(capMiB)
	return map[string]string{
		"x":                  vdev.EnvMemoryLimit + "=x",
		"0=0":                vdev.EnvMemoryLimit + "=0=0",
		"its GPU twice":      vdev.EnvMemoryLimit + "=0=1M,0=999999M",
		"its cap, then 1=1M": vdev.EnvMemoryLimit + "=0=" + c + "M,1=1M",
		"another ordinal":    vdev.EnvMemoryLimit + "=1=" + c + "M",
		"another GPU":        vdev.EnvMemoryLimit + "=" + other.String() + "=" + c + "M",
		"no unit":            vdev.EnvMemoryLimit + "=0=" + c,
	}
}

// connectsAndIsKilled starts a client of device dev with env, connects it
// and checks it is sent SIGKILL by the connect path, its termination in
// the status (cause, detected, escape timed from its start).
func (h *harness) connectsAndIsKilled(t *testing.T, env []string, dev, cause string) {
	t.Helper()
	c := startChild(t, env)
	h.connect(t, c)
	if !c.killed(t) {
		t.Fatalf("client %d (%v) ended with %v, want SIGKILL", c.pid(), env, c.state)
	}
	var term status.Termination
	waitFor(t, "the termination in /status", func() bool {
		var ok bool
		term, ok = termination(h.agent.Status(), c.pid())
		return ok
	})
	if term.Device != dev || term.Cause != cause || term.Detected != accounting.DetectedConnect || term.Step != accounting.StepSIGKILL ||
		term.EscapeFrom != accounting.EscapeFromStart || term.EscapeSeconds <= 0 || term.EscapeSeconds > 60 {
		t.Errorf("termination %+v; want %s on %s, found as it connected, timed from its start", term, cause, dev)
	}
}

// Every escaping environment is terminated as it connects, before its
// first allocation, in both pipe layouts; an honest client of the same
// device is seen (it is listed with its memory once it allocates) and
// never terminated.
func TestEscapingClientsAreKilledAsTheyConnect(t *testing.T) {
	for _, layout := range []string{"", "mps_pipe_layout: single\n"} {
		t.Run(cmpOr(strings.TrimSpace(layout), "per GPU"), func(t *testing.T) {
			h := newHarness(t, connectTick+layout, fourAndTwo)
			h.runLoops(t)
			g0, g1 := twoGPUs()[0].UUID, twoGPUs()[1].UUID
			dev := g0.String() + "::0"
			base := h.cdiEntries(t)[dev].environ()
			capMiB := int(h200Memory / 4)

			honest := startChild(t, envWith(base))
			h.backend.mu.Lock()
			h.backend.procs = map[gpu.UUID][]gpu.Process{g0: {{PID: honest.pid(), UsedMemoryBytes: 1 << 30}}}
			h.backend.mu.Unlock()
			h.connect(t, honest)
			forms := escapeForms(capMiB, g1)
			if layout != "" {
				// The single daemon's ordinal 0 holds GPU 1's larger cap:
				// a client of GPU 0 without its variable gets that.
				forms["dropped"] = vdev.EnvMemoryLimit + "="
			}
			for _, name := range slices.Sorted(mapKeys(forms)) {
				t.Run(name, func(t *testing.T) {
					h.connectsAndIsKilled(t, envWith(base, forms[name]), dev, accounting.CauseLimit)
				})
			}
			waitFor(t, "the honest client listed on its device", func() bool {
				d := deviceOf(h.agent.Status(), dev)
				return d != nil && d.Measured && d.Clients == 1 && d.UsedBytes == 1<<30
			})
			if !honest.alive() {
				t.Errorf("the honest client was terminated: %v", honest.state)
			}
			if _, ok := termination(h.agent.Status(), honest.pid()); ok {
				t.Error("the honest client has a termination in /status")
			}
			if nc := newClients(h.agent.Status()); nc == nil || nc.Checked < uint64(len(forms)+1) {
				t.Errorf("new clients %+v; want every client checked", nc)
			}
		})
	}
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// A Kubernetes claim's device: its GPU's control daemon holds the whole
// GPU, so a client that drops its claim's memory limit, or raises it, is
// terminated as it connects; so is one that drops the thread share of a
// claim below the GPU's.
func TestClaimClientsEscapingAreKilledAsTheyConnect(t *testing.T) {
	h := newHarness(t, connectTick, claimsAndTwo)
	inv := &claimsBackend{rows: backend.NewRows(context.Background(), h.inv, "", nil)}
	var err error
	h.agent, err = New(Options{Config: h.cfg, Backend: h.backend, Runner: h.runner, Devices: inv, SysfsRoot: h.dir + "/nosys", DevRoot: h.dir + "/nodev"})
	if err != nil {
		t.Fatal(err)
	}
	g0 := twoGPUs()[0].UUID
	inv.mu.Lock()
	inv.claims = []claim.Device{
		{Device: vdev.Device{GPU: gpu.Info{UUID: g0}, Index: claimIndex(0), MemoryLimit: 20 << 10, ThreadPercentage: 100}, Claim: "default/c0", UID: "u0"},
		{Device: vdev.Device{GPU: gpu.Info{UUID: g0}, Index: claimIndex(1), MemoryLimit: 10 << 10, ThreadPercentage: 30}, Claim: "default/c1", UID: "u1"},
	}
	inv.mu.Unlock()
	h.runLoops(t)
	c0, c1 := vdev.NameOf(g0, claimIndex(0)).String(), vdev.NameOf(g0, claimIndex(1)).String()
	base := []string{"CUDA_MPS_PIPE_DIRECTORY=" + h.pipeDir(0), "CUDA_VISIBLE_DEVICES=" + g0.String()}
	claimEnv := func(dev string, limit string, threads string) []string {
		e := append(slices.Clone(base), vdev.EnvVar+"="+dev, vdev.EnvMemoryLimit+"="+limit)
		if threads != "" {
			e = append(e, vdev.EnvThreadPercentage+"="+threads)
		}
		return envWith(e)
	}
	honest := startChild(t, claimEnv(c0, "0=20480M", ""))
	h.connect(t, honest)
	t.Run("dropped", func(t *testing.T) {
		h.connectsAndIsKilled(t, envWith(claimEnv(c0, "", ""), vdev.EnvMemoryLimit+"="), c0, accounting.CauseLimit)
	})
	t.Run("raised", func(t *testing.T) {
		h.connectsAndIsKilled(t, claimEnv(c0, "0=40G", ""), c0, accounting.CauseLimit)
	})
	t.Run("thread share dropped", func(t *testing.T) {
		h.connectsAndIsKilled(t, claimEnv(c1, "0=10240M", ""), c1, accounting.CauseQoS)
	})
	keep := startChild(t, claimEnv(c1, "0=10240M", "30"))
	h.connect(t, keep)
	waitFor(t, "both honest clients checked", func() bool {
		nc := newClients(h.agent.Status())
		return nc != nil && nc.Checked >= 5
	})
	if !honest.alive() || !keep.alive() {
		t.Errorf("an honest claim client was terminated: %v, %v", honest.state, keep.state)
	}
}

// claimIndex is the index of the i-th claim's device (pkg/claim's base).
func claimIndex(i int) int { return claim.IndexBase + i }

// What the lines cannot be trusted with, with real processes: a client
// that connects and is gone before it is checked, a line whose PID names
// a process started after it (reused), a hundred clients in one burst. No
// process is killed that was not checked, each case is counted in /status.
func TestConnectPathKillsNoWrongProcess(t *testing.T) {
	h := newHarness(t, connectTick, fourAndTwo)
	h.runLoops(t)
	g0 := twoGPUs()[0].UUID
	dev := g0.String() + "::0"
	base := h.cdiEntries(t)[dev].environ()
	bad := envWith(base, vdev.EnvMemoryLimit+"=x")
	logPath := mps.ControlLog(mps.Env{LogDir: filepath.Join(h.dir, "log", g0.String())})

	t.Run("gone before the check", func(t *testing.T) {
		c := startChild(t, bad)
		pid := c.pid()
		_ = c.cmd.Process.Kill()
		<-c.done
		before := newClients(h.agent.Status()).Exited
		if _, err := h.runner.Connect(pid, bad); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the client counted as gone", func() bool { return newClients(h.agent.Status()).Exited >= before+1 })
		if _, ok := termination(h.agent.Status(), pid); ok {
			t.Error("a termination was recorded for a client that was gone")
		}
	})

	t.Run("PID reused", func(t *testing.T) {
		// A line 10 s older than the process its PID names now: another
		// process connected then, and this one took its PID since.
		c := startChild(t, bad)
		before := newClients(h.agent.Status()).Reused
		line := fmt.Sprintf("[%s Control %5d] NEW CLIENT %d from user 0: Server already exists\n",
			time.Now().Add(-10*time.Second).Format("2006-01-02 15:04:05.000"), os.Getpid(), c.pid())
		appendLine(t, logPath, line)
		waitFor(t, "the line counted as a reused PID", func() bool { return newClients(h.agent.Status()).Reused >= before+1 })
		if !c.alive() {
			t.Fatalf("the process now holding the PID was killed: %v", c.state)
		}
		// Its own connection is checked, and it escapes: then it goes.
		h.connect(t, c)
		if !c.killed(t) {
			t.Errorf("ended with %v, want SIGKILL once it connected itself", c.state)
		}
	})

	t.Run("a hundred at once", func(t *testing.T) {
		var all []*child
		var bads []*child
		for i := range 100 {
			env := envWith(base)
			if i%10 == 7 {
				env = bad
			}
			c := startChild(t, env)
			all = append(all, c)
			if i%10 == 7 {
				bads = append(bads, c)
			}
		}
		before := newClients(h.agent.Status()).Checked
		var wg sync.WaitGroup
		for _, c := range all {
			wg.Go(func() { h.connect(t, c) })
		}
		wg.Wait()
		for _, c := range bads {
			if !c.killed(t) {
				t.Errorf("escaping client %d ended with %v, want SIGKILL", c.pid(), c.state)
			}
		}
		waitFor(t, "all hundred checked", func() bool { return newClients(h.agent.Status()).Checked >= before+100 })
		for _, c := range all {
			if !slices.Contains(bads, c) && !c.alive() {
				t.Errorf("honest client %d ended: %v", c.pid(), c.state)
			}
		}
	})
}

func appendLine(t *testing.T, path, line string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line); err != nil {
		t.Fatal(err)
	}
}

// A client whose /proc entry cannot be read (its stat is not a file) is
// billed to no device and reported, never signalled; an escaping client
// beside it still is.
func TestConnectPathReportsAnUnreadableProc(t *testing.T) {
	h := newHarness(t, connectTick, fourAndTwo)
	killer := &signals{}
	h.withFakeProc(t, killer)
	h.runLoops(t)
	g0 := twoGPUs()[0].UUID
	dev := g0.String() + "::0"
	const unreadable, escaping = 4_000_001, 4_000_002
	h.addProc(t, unreadable, 1000, dev)
	h.addProc(t, escaping, 1000, dev)
	stat := filepath.Join(h.cfg.Host.ProcRoot, strconv.Itoa(unreadable), "stat")
	if err := os.Remove(stat); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(stat, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.cfg.Host.ProcRoot, strconv.Itoa(escaping), "environ"),
		[]byte(vdev.EnvVar+"="+dev+"\x00"+vdev.EnvMemoryLimit+"=x\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	// NVML lists the unreadable one as it connects, as it lists any client
	// (docs/gpu-runs/mps-probe-escape.txt: 7 ms after its start).
	h.backend.mu.Lock()
	h.backend.procs = map[gpu.UUID][]gpu.Process{g0: {{PID: unreadable, UsedMemoryBytes: 30 << 20}}}
	h.backend.mu.Unlock()
	env := []string{"CUDA_MPS_PIPE_DIRECTORY=" + h.pipeDir(0)}
	for _, pid := range []int{unreadable, escaping} {
		if _, err := h.runner.Connect(pid, env); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the escaping one signalled", func() bool {
		killer.mu.Lock()
		defer killer.mu.Unlock()
		return len(killer.sent) > 0
	})
	waitFor(t, "the unreadable one reported", func() bool {
		a := h.agent.Status().Accounting
		return a != nil && slices.ContainsFunc(a.Unknown, func(u clientreport.Unknown) bool {
			return u.PID == unreadable && strings.Contains(u.Reason, "stat")
		})
	})
	killer.mu.Lock()
	defer killer.mu.Unlock()
	if want := []string{fmt.Sprintf("%d:%d", escaping, syscall.SIGKILL)}; !slices.Equal(killer.sent, want) {
		t.Errorf("signals %v, want only %v", killer.sent, want)
	}
}

// An escape no environment shows (two processes of one device whose sum
// passes its cap): the GPU has clients, so it is polled, and the process
// that pushed the device over is terminated by the poll, its escape timed
// from the crossing; once NVML lists no client, the GPU is polled no more.
func TestPollCatchesADeviceOverItsCap(t *testing.T) {
	h := newHarness(t, connectTick, fourAndTwo)
	h.runLoops(t)
	g0 := twoGPUs()[0].UUID
	dev := g0.String() + "::0"
	base := h.cdiEntries(t)[dev].environ()
	first, second := startChild(t, envWith(base)), startChild(t, envWith(base))
	const gib = 1 << 30
	list := func(a, b uint64) {
		h.backend.mu.Lock()
		defer h.backend.mu.Unlock()
		h.backend.procs = map[gpu.UUID][]gpu.Process{g0: {{PID: first.pid(), UsedMemoryBytes: a}, {PID: second.pid(), UsedMemoryBytes: b}}}
	}
	list(20*gib, gib)
	h.connect(t, first)
	h.connect(t, second)
	waitFor(t, "both listed under the cap", func() bool {
		d := deviceOf(h.agent.Status(), dev)
		return d != nil && d.Clients == 2 && d.UsedBytes == 21*gib && !d.OverCap
	})
	if nc := newClients(h.agent.Status()); nc == nil || !slices.Contains(nc.PolledGPUs, g0.String()) {
		t.Fatalf("GPU 0 has clients but is not polled: %+v", nc)
	}
	list(20*gib, 20*gib)
	var term status.Termination
	waitFor(t, "the second terminated", func() bool {
		var ok bool
		term, ok = termination(h.agent.Status(), second.pid())
		return ok
	})
	if term.Device != dev || term.Cause != accounting.CauseMemory || term.Detected != accounting.DetectedPoll ||
		term.Step != accounting.StepTerminateClient || term.EscapeFrom != accounting.EscapeFromCap || term.EscapeSecondsAtMost <= 0 {
		t.Errorf("termination %+v; want memory_cap found by the poll, timed from the crossing", term)
	}
	if _, ok := termination(h.agent.Status(), first.pid()); ok {
		t.Error("the first process, which did not grow, was terminated too")
	}
	h.backend.mu.Lock()
	h.backend.procs = nil
	h.backend.mu.Unlock()
	waitFor(t, "an idle GPU no longer polled", func() bool {
		nc := newClients(h.agent.Status())
		return nc != nil && len(nc.PolledGPUs) == 0
	})
}

// A client connected before the daemon started (its line was written to
// no one) is checked by the accounting's first pass, right after the
// first reconcile, not a health tick later.
func TestClientsConnectedBeforeTheStartAreCheckedAtOnce(t *testing.T) {
	h := newHarness(t, connectTick, fourAndTwo)
	if err := h.agent.Reconcile(context.Background()); err != nil { // the spec, for the client's environment
		t.Fatal(err)
	}
	g0 := twoGPUs()[0].UUID
	dev := g0.String() + "::0"
	c := startChild(t, envWith(h.cdiEntries(t)[dev].environ(), vdev.EnvMemoryLimit+"=x"))
	h.connect(t, c)
	h.backend.mu.Lock()
	h.backend.procs = map[gpu.UUID][]gpu.Process{g0: {{PID: c.pid(), UsedMemoryBytes: 1 << 30}}}
	h.backend.mu.Unlock()
	h.agent, _ = New(Options{Config: h.cfg, Backend: h.backend, Runner: h.runner, Devices: backend.NewRows(context.Background(), h.inv, "", nil), SysfsRoot: h.dir + "/nosys", DevRoot: h.dir + "/nodev"})
	h.runLoops(t)
	var term status.Termination
	waitFor(t, "the client terminated", func() bool {
		var ok bool
		term, ok = termination(h.agent.Status(), c.pid())
		return ok
	})
	if term.Cause != accounting.CauseLimit || term.Detected != accounting.DetectedTick || term.Step != accounting.StepTerminateClient {
		t.Errorf("termination %+v; want limit_escape found by the first pass, terminate_client", term)
	}
}

// A control.log that cannot be followed (its directory gone) is said so,
// and its GPU is polled even while idle: a client with an escaping
// environment that NVML lists is found by the poll and killed at once.
func TestUnfollowedLogFallsBackToPolling(t *testing.T) {
	h := newHarness(t, connectTick, fourAndTwo)
	h.runLoops(t)
	g0 := twoGPUs()[0].UUID
	dev := g0.String() + "::0"
	env := envWith(h.cdiEntries(t)[dev].environ(), vdev.EnvMemoryLimit+"=0=0")
	logDir := filepath.Join(h.dir, "log", g0.String())
	if err := os.RemoveAll(logDir); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the log reported not followed and its GPU polled", func() bool {
		nc := newClients(h.agent.Status())
		if nc == nil || !slices.Contains(nc.PolledGPUs, g0.String()) {
			return false
		}
		for _, l := range nc.Logs {
			if strings.HasPrefix(l.Path, logDir) {
				return !l.Following && strings.Contains(l.Error, logDir)
			}
		}
		return false
	})
	c := startChild(t, env)
	h.backend.mu.Lock()
	h.backend.procs = map[gpu.UUID][]gpu.Process{g0: {{PID: c.pid(), UsedMemoryBytes: 300 << 20}}}
	h.backend.mu.Unlock()
	if !c.killed(t) {
		t.Fatalf("ended with %v, want SIGKILL", c.state)
	}
	var term status.Termination
	waitFor(t, "its termination in /status", func() bool {
		var ok bool
		term, ok = termination(h.agent.Status(), c.pid())
		return ok
	})
	if term.Detected != accounting.DetectedPoll || term.Step != accounting.StepSIGKILL || term.Cause != accounting.CauseLimit {
		t.Errorf("termination %+v; want found by the poll, SIGKILL at once", term)
	}
}

// A client caught escaping as it connects is killed once its server says
// its context is up, not while it is still connecting (killed then, it
// would wedge its MPS server: docs/gpu-runs/probe-wedge-2026-11-29.txt):
// found and reported at its NEW CLIENT line, alive until its ACTIVE line.
func TestAnEscapeIsKilledOnceItsContextIsUp(t *testing.T) {
	h, c := escapeHeldShortOfItsContext(t, time.Hour) // only the ACTIVE line can set the kill off
	waitFor(t, "the escape found as the client connected", func() bool {
		s := h.agent.Status()
		return s.Accounting != nil && slices.ContainsFunc(s.Accounting.QoSEscapes, func(e clientreport.Escape) bool { return e.PID == c.pid() })
	})
	if !c.alive() {
		t.Fatalf("client %d killed before its context was up: %v", c.pid(), c.state)
	}
	if err := h.runner.ContextUp(c.pid()); err != nil {
		t.Fatal(err)
	}
	if !c.killed(t) {
		t.Fatalf("client %d ended with %v, want SIGKILL once its context was up", c.pid(), c.state)
	}
	waitFor(t, "the termination in /status", func() bool {
		term, ok := termination(h.agent.Status(), c.pid())
		return ok && term.Detected == accounting.DetectedConnect && term.Step == accounting.StepSIGKILL
	})
	waitFor(t, "the ACTIVE line counted in /status", func() bool {
		nc := newClients(h.agent.Status())
		return nc != nil && slices.ContainsFunc(nc.Logs, func(l status.ClientLog) bool { return l.Active >= 1 })
	})
}

// A client caught escaping as it connects whose context never comes up
// (no ACTIVE line: NVML does not list it either) is killed once
// ActiveWait is up, by the polls, not left for the health tick (ten
// minutes away here).
func TestAnEscapeWithoutItsContextIsKilledAtActiveWait(t *testing.T) {
	h, c := escapeHeldShortOfItsContext(t, 300*time.Millisecond) // past the first poll, 100 ms after the connection
	if !c.killed(t) {
		t.Fatalf("client %d ended with %v, want SIGKILL once ActiveWait was up", c.pid(), c.state)
	}
	waitFor(t, "the termination in /status", func() bool {
		term, ok := termination(h.agent.Status(), c.pid())
		return ok && term.Detected == accounting.DetectedConnect && term.Step == accounting.StepSIGKILL
	})
}

// escapeHeldShortOfItsContext starts the agent's loops with activeWait,
// and a client of GPU 0's first device with an escaping memory limit list
// that connects and stops short of its context (no ACTIVE line until
// ContextUp).
func escapeHeldShortOfItsContext(t *testing.T, activeWait time.Duration) (*harness, *child) {
	t.Helper()
	h := newHarness(t, connectTick, fourAndTwo)
	o := h.agent.opts
	o.ActiveWait = activeWait
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	h.agent = a
	h.runLoops(t)
	dev := twoGPUs()[0].UUID.String() + "::0"
	h.runner.HoldContexts(true)
	c := startChild(t, envWith(h.cdiEntries(t)[dev].environ(), vdev.EnvMemoryLimit+"=x"))
	h.connect(t, c)
	return h, c
}
