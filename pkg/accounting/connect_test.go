package accounting

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// connectRig is an Accountant over a fake /proc whose host has been up
// 1000 s, and a container c given device gpuA::0 (cap 20 GiB).
type connectRig struct {
	proc   *fakeProc
	killer *fakeKiller
	clock  *fakeClock
	logs   *bytes.Buffer
	acct   *Accountant
	caps   map[string]uint64
	terms  map[gpu.UUID]Terminator
}

const rigUptime = 1000 * time.Second

func newConnectRig(t *testing.T) *connectRig {
	r := &connectRig{proc: newFakeProc(t), clock: &fakeClock{t: time.Unix(1_800_000_000, 0)}, logs: &bytes.Buffer{}}
	r.killer = &fakeKiller{proc: r.proc, ignoreTERM: map[int]bool{}}
	r.acct = New(Options{ProcRoot: r.proc.root, Identities: r.proc.store.Table, Grace: grace, Killer: r.killer, Now: r.clock.now,
		Uptime: func() time.Duration { return rigUptime }, Log: slog.New(slog.NewTextHandler(r.logs, nil))})
	r.caps = map[string]uint64{gpuA + "::0": 20 * gib, gpuA + "::1": 20 * gib}
	r.terms = map[gpu.UUID]Terminator{gpuA: &fakeTerminator{proc: r.proc, clients: map[int]int{}}}
	r.proc.give("c", gpuA+"::0")
	return r
}

// client makes a process of container c started at start (clock ticks
// after boot) with the device's environment and extra entries.
func (r *connectRig) client(pid int, start uint64, extra ...string) {
	r.proc.addContainer(pid, 1, start, "c", gpuA+"::0")
	r.proc.write(pid, "environ", env(append([]string{"PATH=/usr/bin", vdev.EnvVar + "=" + gpuA + "::0"}, extra...)...))
}

func (r *connectRig) connected(p config.AccountingPolicy, pids ...int) ConnectReport {
	var ncs []NewClient
	for _, pid := range pids {
		ncs = append(ncs, NewClient{PID: pid, GPUs: []gpu.UUID{gpuA}, At: r.clock.now()})
	}
	return r.acct.Connected(context.Background(), p, ncs, r.caps, nil, r.terms)
}

func limitEnv(v string) string { return vdev.EnvMemoryLimit + "=" + v }

// Every environment the accounting knows to escape the device's memory
// limit, and a container client that hid its identity, is found the
// moment it connects and sent SIGKILL the moment its server says its
// context is up (nothing is asked of MPS first: it holds no memory yet;
// never sooner: a client killed while connecting wedges its server); the
// honest ones are left alone; under report nobody is signalled and every
// escape is logged once. Each termination says how long the escape
// lasted: from the client's start.
func TestConnectedKillsEscapesOnceTheirContextIsUp(t *testing.T) {
	honest := map[int]string{10: limitEnv("0=20480M"), 11: limitEnv("0=1024M"), 12: ""}
	escaping := map[int]string{
		20: limitEnv("x"), 21: limitEnv("0=0"), 22: limitEnv("0=1M,0=999999M"), 23: limitEnv("0=20480M,1=1M"),
		24: limitEnv("1=20480M"), 25: limitEnv(string(gpuB) + "=20480M"), 26: limitEnv("20480M"),
	}
	for _, policy := range []config.AccountingPolicy{config.AccountingReport, config.AccountingEnforce} {
		t.Run(string(policy), func(t *testing.T) {
			r := newConnectRig(t)
			var pids []int
			for pid, e := range honest {
				r.client(pid, 500, e)
				pids = append(pids, pid)
			}
			for pid, e := range escaping {
				r.client(pid, 900, e)
				pids = append(pids, pid)
			}
			// A container process that hid its identity file (unshare, a
			// tmpfs over it) and whose cgroup shows no device either.
			r.proc.addHidden(30, 1, 900, "alone", gpuA+"::0")
			pids = append(pids, 30)
			slices.Sort(pids)
			rep := r.connected(policy, pids...)
			if rep.Checked != len(pids) || len(rep.Skipped) != 0 {
				t.Fatalf("checked %d, skipped %v; want all %d checked", rep.Checked, rep.Skipped, len(pids))
			}
			var esc []int
			for _, e := range rep.Usage.Escapes {
				esc = append(esc, e.PID)
			}
			if want := []int{20, 21, 22, 23, 24, 25, 26}; !slices.Equal(esc, want) {
				t.Errorf("escapes %v, want %v", esc, want)
			}
			if policy == config.AccountingReport {
				if len(r.killer.sent) != 0 || len(rep.Steps) != 0 {
					t.Errorf("report signalled %v, steps %+v", r.killer.sent, rep.Steps)
				}
				if n := strings.Count(r.logs.String(), "escapes its device's QoS or memory limit"); n != 7 {
					t.Errorf("%d escape lines logged, want 7:\n%s", n, r.logs)
				}
				return
			}
			if len(r.killer.sent) != 0 || len(rep.Steps) != 0 {
				t.Fatalf("signalled %v (steps %+v) before any context was up", r.killer.sent, rep.Steps)
			}
			if got := r.acct.enf.Terminating(); len(got) != 8 {
				t.Errorf("%d terminations under way before the contexts are up, want 8", len(got))
			}
			act := r.acct.Activated(context.Background(), policy, pids)
			want := []string{"20:KILL", "21:KILL", "22:KILL", "23:KILL", "24:KILL", "25:KILL", "26:KILL", "30:KILL"}
			if got := slices.Sorted(slices.Values(r.killer.sent)); !slices.Equal(got, want) {
				t.Errorf("signals %v, want %v", got, want)
			}
			if len(act.Steps) != 8 {
				t.Errorf("steps %+v, want 8", act.Steps)
			}
			for _, s := range act.Steps {
				least, _, ok := s.Escape.Lasted(s.At)
				// Started 9 s after boot, on a host up 1000 s.
				if s.Step != StepSIGKILL || !s.First || s.Detected != DetectedConnect || s.Escape.From != EscapeFromStart ||
					!ok || least != rigUptime-9*time.Second {
					t.Errorf("step %+v (escape lasted %s, %v)", s, least, ok)
				}
			}
			if got := r.acct.enf.Terminating(); len(got) != 8 {
				t.Errorf("%d terminations under way, want 8", len(got))
			}
			// The line of each one's second connection: all were checked
			// already (the escaping ones gone since), none is again.
			again := r.connected(policy, pids...)
			if again.Checked != 0 || again.Again != 11 || len(again.Skipped) != 0 || len(again.Steps) != 0 {
				t.Errorf("second lines: checked %d, again %d, skipped %v, steps %+v; want all 11 seen before",
					again.Checked, again.Again, again.Skipped, again.Steps)
			}
			if !strings.Contains(r.logs.String(), "detected=connect escape_from=client_start escape_seconds=991") {
				t.Errorf("the termination's log line does not say how it was found and how long it lasted:\n%s", r.logs)
			}
		})
	}
}

// What a connecting client's line cannot be trusted with: a client gone
// before it could be checked, a PID that names a process started after
// the line (reused), a /proc entry that cannot be read. None is signalled,
// each is reported.
func TestConnectedNeverKillsAProcessItDidNotCheck(t *testing.T) {
	r := newConnectRig(t)
	// 40: gone. 41: started 60 s after the line it is named in, its
	// environment escaping. 42: its stat unreadable (a directory).
	r.client(41, 99_000, limitEnv("x"))
	r.client(42, 900, limitEnv("x"))
	if err := os.Remove(filepath.Join(r.proc.root, "42", "stat")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(r.proc.root, "42", "stat"), 0o755); err != nil {
		t.Fatal(err)
	}
	ncs := []NewClient{
		{PID: 40, GPUs: []gpu.UUID{gpuA}, At: r.clock.now()},
		{PID: 41, GPUs: []gpu.UUID{gpuA}, At: r.clock.now().Add(-rigUptime + 900*time.Second)},
		{PID: 42, GPUs: []gpu.UUID{gpuA}, At: r.clock.now()},
	}
	rep := r.acct.Connected(context.Background(), config.AccountingEnforce, ncs, r.caps, nil, r.terms)
	if len(r.killer.sent) != 0 || len(rep.Steps) != 0 {
		t.Fatalf("signalled %v, steps %+v", r.killer.sent, rep.Steps)
	}
	want := []Skipped{{40, SkipExited}, {41, SkipReused}}
	if !slices.Equal(rep.Skipped, want) {
		t.Errorf("skipped %+v, want %+v", rep.Skipped, want)
	}
	if len(rep.Usage.Unknown) != 1 || rep.Usage.Unknown[0].PID != 42 || rep.Usage.Unknown[0].Hidden {
		t.Errorf("unknown %+v; want 42, its /proc unreadable, never terminated", rep.Usage.Unknown)
	}
	out := r.logs.String()
	for _, s := range []string{"pid=40 reason=\"" + SkipExited, "pid=41 reason=\"" + SkipReused, "never terminated)\" component=accounting gpu=" + string(gpuA) + " pid=42"} {
		if !strings.Contains(out, s) {
			t.Errorf("log lacks %q:\n%s", s, out)
		}
	}
}

// A hundred clients in one batch are each checked once, and only the
// escaping ones are signalled.
func TestConnectedChecksABurst(t *testing.T) {
	r := newConnectRig(t)
	var pids []int
	var want []string
	for pid := 100; pid < 200; pid++ {
		e := limitEnv("0=20480M")
		if pid%10 == 3 {
			e = limitEnv("x")
			want = append(want, strconv.Itoa(pid)+":KILL")
		}
		r.client(pid, 900, e)
		pids = append(pids, pid, pid) // each connects twice
	}
	rep := r.connected(config.AccountingEnforce, pids...)
	if rep.Checked != 100 || rep.Again != 100 {
		t.Errorf("checked %d, again %d; want 100 and 100", rep.Checked, rep.Again)
	}
	r.acct.Activated(context.Background(), config.AccountingEnforce, pids)
	if got := slices.Sorted(slices.Values(r.killer.sent)); !slices.Equal(got, want) {
		t.Errorf("signals %v, want %v", got, want)
	}
}

// The single layout's line names no GPU: the client is billed to the
// device of whichever of the daemon's GPUs its identity names.
func TestConnectedFindsTheGPUInTheSingleLayout(t *testing.T) {
	r := newConnectRig(t)
	r.caps[gpuB+"::0"] = 20 * gib
	r.proc.give("d", gpuB+"::0")
	r.proc.addContainer(50, 1, 900, "d", gpuB+"::0")
	r.proc.write(50, "environ", env("PATH=/usr/bin", vdev.EnvVar+"="+gpuB+"::0", limitEnv("0=0")))
	rep := r.acct.Connected(context.Background(), config.AccountingEnforce,
		[]NewClient{{PID: 50, GPUs: []gpu.UUID{gpuA, gpuB}, At: r.clock.now()}}, r.caps, nil, r.terms)
	if len(rep.Usage.Escapes) != 1 || rep.Usage.Escapes[0].Device != gpuB+"::0" || len(rep.Usage.Unknown) != 0 {
		t.Fatalf("escapes %+v, unknown %+v; want 50 on %s::0", rep.Usage.Escapes, rep.Usage.Unknown, gpuB)
	}
	r.acct.Activated(context.Background(), config.AccountingEnforce, []int{50})
	if fmt.Sprint(r.killer.sent) != "[50:KILL]" {
		t.Errorf("signals %v", r.killer.sent)
	}
}

// A device's crossing of its cap is timed by the samples: a termination
// for memory says it lasted at least since the first sample that saw the
// device over, at most since the last one that saw it under.
func TestPollTimesTheCrossingOfACap(t *testing.T) {
	r := newConnectRig(t)
	r.client(60, 500)
	r.client(61, 600)
	dev := gpuA + "::0"
	r.terms[gpuA].(*fakeTerminator).clients = map[int]int{60: 1, 61: 1}
	sample := func(used60, used61 uint64) Report {
		procs := map[gpu.UUID][]gpu.Process{gpuA: {{PID: 60, UsedMemoryBytes: used60}, {PID: 61, UsedMemoryBytes: used61}}}
		return r.acct.Poll(context.Background(), config.AccountingEnforce, procs, r.caps, nil, r.terms)
	}
	under := r.clock.now()
	sample(10*gib, gib)
	r.clock.advance(100 * time.Millisecond)
	over := r.clock.now()
	rep := sample(10*gib, 15*gib)
	if len(rep.Steps) != 1 || rep.Steps[0].PID != 61 || rep.Steps[0].Step != StepTerminateClient || rep.Steps[0].Device != dev {
		t.Fatalf("steps %+v; want 61 terminated", rep.Steps)
	}
	s := rep.Steps[0]
	if s.Detected != DetectedPoll || s.Escape != (EscapeTime{From: EscapeFromCap, Since: over, Bound: under}) {
		t.Errorf("step %+v; want found by the poll, over since %s, under at %s", s, over, under)
	}
	if least, most, _ := s.Escape.Lasted(s.At); least != 0 || most != 100*time.Millisecond {
		t.Errorf("lasted %s .. %s, want 0 .. 100ms", least, most)
	}
	// terminate_client left the sleeping client and its memory: the
	// poll's grace is short, and the next poll after it signals.
	r.clock.advance(PollGrace - time.Millisecond)
	if rep := sample(10*gib, 15*gib); len(rep.Steps) != 0 {
		t.Errorf("steps %+v within the poll's grace", rep.Steps)
	}
	r.clock.advance(time.Millisecond)
	if rep := sample(10*gib, 15*gib); fmt.Sprint(stepNames(rep.Steps)) != "[61:sigterm]" {
		t.Errorf("steps %v after the poll's grace, want 61 sent SIGTERM", stepNames(rep.Steps))
	}
	// An escape in a client's environment that the poll finds (its
	// control.log not followed) is stopped as the connect check stops it.
	r.client(62, 700, limitEnv("x"))
	procs := map[gpu.UUID][]gpu.Process{gpuA: {{PID: 60, UsedMemoryBytes: 10 * gib}, {PID: 62, UsedMemoryBytes: 0}}}
	rep = r.acct.Poll(context.Background(), config.AccountingEnforce, procs, r.caps, nil, r.terms)
	if fmt.Sprint(stepNames(rep.Steps)) != "[62:sigkill]" {
		t.Errorf("steps %v, want 62 sent SIGKILL at once", stepNames(rep.Steps))
	}
}

// A poll takes a client it knows as the last pass found it, while its
// start time is the same; a PID that names a new process is looked up
// afresh, and the tick looks every client up again.
func TestPollKnowsItsClients(t *testing.T) {
	r := newConnectRig(t)
	r.client(70, 500)
	procs := map[gpu.UUID][]gpu.Process{gpuA: {{PID: 70, UsedMemoryBytes: gib}}}
	poll := func() Report {
		return r.acct.Poll(context.Background(), config.AccountingReport, procs, r.caps, nil, r.terms)
	}
	if rep := poll(); len(rep.Usage.PerDevice[gpuA+"::0"].Clients) != 1 {
		t.Fatalf("first poll: %+v", rep.Usage)
	}
	// Its environment rewritten in place (a process may): the poll goes
	// on with what it knew, the tick sees the escape.
	r.proc.write(70, "environ", env("PATH=/usr/bin", vdev.EnvVar+"="+gpuA+"::0", limitEnv("x")))
	if rep := poll(); len(rep.Usage.Escapes) != 0 {
		t.Errorf("the poll looked the known client up again: %+v", rep.Usage.Escapes)
	}
	if rep := r.acct.Tick(context.Background(), config.AccountingReport, procs, r.caps, nil, r.terms); len(rep.Usage.Escapes) != 1 {
		t.Errorf("the tick did not look it up afresh: %+v", rep.Usage.Escapes)
	}
	// The PID reused by a process of another device: looked up afresh.
	r.proc.exit(70)
	r.proc.give("d", gpuA+"::1")
	r.proc.addContainer(70, 1, 600, "d", gpuA+"::1")
	if rep := poll(); len(rep.Usage.PerDevice[gpuA+"::1"].Clients) != 1 || len(rep.Usage.PerDevice[gpuA+"::0"].Clients) != 0 {
		t.Errorf("a reused PID billed as the process it was: %+v", rep.Usage.PerDevice)
	}
}

// A client caught as it connected whose context never says it came up
// (its server.log not followed, or it asked for no context) is killed
// ActiveWait after, on the next pass, and only then.
func TestConnectedKillsAtTheDeadlineWithoutActive(t *testing.T) {
	r := newConnectRig(t)
	r.client(60, 900, limitEnv("x"))
	r.connected(config.AccountingEnforce, 60)
	r.clock.advance(ActiveWait - time.Millisecond)
	if steps := r.acct.enf.Run(context.Background(), Usage{}, nil, r.terms); len(steps) != 0 || len(r.killer.sent) != 0 {
		t.Fatalf("before ActiveWait: steps %+v, signals %v", steps, r.killer.sent)
	}
	r.clock.advance(time.Millisecond)
	steps := r.acct.enf.Run(context.Background(), Usage{}, nil, r.terms)
	if fmt.Sprint(r.killer.sent) != "[60:KILL]" || len(steps) != 1 || !steps[0].First || steps[0].Step != StepSIGKILL || steps[0].Detected != DetectedConnect {
		t.Errorf("at ActiveWait: steps %+v, signals %v; want 60 killed, its first step", steps, r.killer.sent)
	}
}

// A client whose ACTIVE line was read before it was found to escape is
// killed at once; one found again by a pass that saw it on the GPU
// (its context is up, whatever the log says) is too; a client gone
// before its context came up is let go.
func TestConnectedKillsAtOnceWhenTheContextIsKnownUp(t *testing.T) {
	r := newConnectRig(t)
	for _, pid := range []int{61, 62, 63} {
		r.client(pid, 900, limitEnv("x"))
	}
	r.acct.Activated(context.Background(), config.AccountingEnforce, []int{61})
	rep := r.connected(config.AccountingEnforce, 61, 62, 63)
	if fmt.Sprint(r.killer.sent) != "[61:KILL]" || len(rep.Steps) != 1 {
		t.Fatalf("signals %v, steps %+v; want 61 killed at once, its ACTIVE line read first", r.killer.sent, rep.Steps)
	}
	procs := map[gpu.UUID][]gpu.Process{gpuA: {{PID: 62, UsedMemoryBytes: 1 << 30}}}
	steps := r.acct.Poll(context.Background(), config.AccountingEnforce, procs, r.caps, nil, r.terms).Steps
	if fmt.Sprint(r.killer.sent) != "[61:KILL 62:KILL]" || len(steps) != 1 || !steps[0].First || steps[0].Detected != DetectedConnect {
		t.Fatalf("signals %v, steps %+v; want 62 killed once a pass saw it on the GPU", r.killer.sent, steps)
	}
	r.proc.exit(63)
	r.clock.advance(ActiveWait)
	steps = r.acct.enf.Run(context.Background(), Usage{}, nil, r.terms)
	if len(r.killer.sent) != 2 || len(steps) != 1 || steps[0].Step != StepGone {
		t.Errorf("signals %v, steps %+v; want 63, gone, never signalled", r.killer.sent, steps)
	}
}

// Under report, a context coming up kills nobody.
func TestActivatedUnderReportKillsNobody(t *testing.T) {
	r := newConnectRig(t)
	r.client(64, 900, limitEnv("x"))
	r.connected(config.AccountingReport, 64)
	if rep := r.acct.Activated(context.Background(), config.AccountingReport, []int{64}); len(rep.Steps) != 0 || len(r.killer.sent) != 0 {
		t.Errorf("steps %+v, signals %v", rep.Steps, r.killer.sent)
	}
}
