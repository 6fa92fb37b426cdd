package accounting

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/gpu"
)

// fakeKiller signals the processes of a fakeProc tree: SIGKILL removes one,
// SIGTERM too unless it ignores SIGTERM; signal 0 asks the tree.
type fakeKiller struct {
	proc       *fakeProc
	ignoreTERM map[int]bool
	sent       []string // "pid:signal", signal 0 left out
}

func (k *fakeKiller) Signal(pid int, sig syscall.Signal) error {
	if sig != 0 {
		k.sent = append(k.sent, fmt.Sprintf("%d:%s", pid, sigName(sig)))
	}
	if _, err := os.Stat(filepath.Join(k.proc.root, strconv.Itoa(pid))); err != nil {
		return syscall.ESRCH
	}
	if sig == syscall.SIGKILL || (sig == syscall.SIGTERM && !k.ignoreTERM[pid]) {
		k.proc.exit(pid)
	}
	return nil
}

func sigName(s syscall.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "TERM"
	case syscall.SIGKILL:
		return "KILL"
	}
	return s.String()
}

// fakeTerminator is one GPU's MPS control: clients maps client -> server.
// exitOnTerminate makes the process go when its context is torn down (a
// client busy in CUDA); otherwise it stays, as a sleeping one did on an H200.
type fakeTerminator struct {
	proc            *fakeProc
	clients         map[int]int
	exitOnTerminate bool
	err             error
	calls           []string
	lists           int // ClientServers calls
}

func (f *fakeTerminator) ClientServers(context.Context) (map[int]int, error) {
	f.lists++
	if f.err != nil {
		return nil, f.err
	}
	return f.clients, nil
}

func (f *fakeTerminator) TerminateClient(_ context.Context, server, client int) error {
	f.calls = append(f.calls, fmt.Sprintf("%d:%d", server, client))
	if f.clients[client] != server {
		return errors.New("1")
	}
	delete(f.clients, client)
	if f.exitOnTerminate {
		f.proc.exit(client)
	}
	return nil
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// enforcerRig is an Enforcer over a fake /proc, killer and clock.
type enforcerRig struct {
	proc   *fakeProc
	killer *fakeKiller
	clock  *fakeClock
	logs   *bytes.Buffer
	enf    *Enforcer
}

const grace = 5 * time.Second

func newEnforcerRig(t *testing.T) *enforcerRig {
	r := &enforcerRig{proc: newFakeProc(t), clock: &fakeClock{t: time.Unix(1_800_000_000, 0)}, logs: &bytes.Buffer{}}
	r.killer = &fakeKiller{proc: r.proc, ignoreTERM: map[int]bool{}}
	var err error
	r.enf, err = NewEnforcer(EnforcerOptions{Grace: grace, Killer: r.killer, Procs: &Mapper{ProcRoot: r.proc.root},
		Now: r.clock.now, Log: slog.New(slog.NewTextHandler(r.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func stepNames(steps []Step) []string {
	var out []string
	for _, s := range steps {
		out = append(out, fmt.Sprintf("%d:%s", s.PID, s.Step))
	}
	return out
}

func action(pid int, start uint64) Action {
	return Action{PID: pid, Device: gpuA + "::0", GPU: gpuA, UsedBytes: 4 * gib, DeviceUsedBytes: 9 * gib, CapBytes: 8 * gib,
		StartTicks: start, Reason: "test"}
}

func listing(pids ...int) Usage {
	return Usage{PerDevice: map[string]DeviceUsage{gpuA + "::0": {GPU: gpuA, PIDs: pids}}}
}

func TestEnforcerSteps(t *testing.T) {
	for _, tc := range []struct {
		name       string
		exits      bool // the client exits when its context is torn down
		ignoreTERM bool
		// steps per Run: the first with the action, each later one a grace
		// period after the one before, except where noted in run
		want [][]string
		sent []string
	}{
		{name: "terminate_client is enough", exits: true,
			want: [][]string{{"11:terminate_client"}, {"11:gone"}}},
		{name: "still alive after terminate_client: SIGTERM", exits: false,
			want: [][]string{{"11:terminate_client"}, {"11:sigterm"}, {"11:gone"}},
			sent: []string{"11:TERM"}},
		{name: "ignores SIGTERM: SIGKILL", exits: false, ignoreTERM: true,
			want: [][]string{{"11:terminate_client"}, {"11:sigterm"}, {"11:sigkill"}, {"11:gone"}},
			sent: []string{"11:TERM", "11:KILL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newEnforcerRig(t)
			r.proc.add(10, 100, gpuA+"::0")
			r.proc.add(11, 200, gpuA+"::0")
			r.killer.ignoreTERM[11] = tc.ignoreTERM
			term := &fakeTerminator{proc: r.proc, clients: map[int]int{10: 1066, 11: 1066}, exitOnTerminate: tc.exits}
			terms := map[gpu.UUID]Terminator{gpuA: term}

			var got [][]string
			got = append(got, stepNames(r.enf.Run(t.Context(), listing(10, 11), []Action{action(11, 200)}, terms)))
			if !r.enf.Terminating()[11] {
				t.Fatal("PID 11 is not recorded as being terminated")
			}
			for range len(tc.want) - 1 {
				// Before the grace period is over nothing moves: the
				// pending kill survives to a later call.
				r.clock.advance(grace - time.Millisecond)
				if s := r.enf.Run(t.Context(), listing(10, 11), nil, terms); len(s) != 0 {
					t.Fatalf("within the grace period: %v", stepNames(s))
				}
				r.clock.advance(time.Millisecond)
				got = append(got, stepNames(r.enf.Run(t.Context(), listing(10, 11), nil, terms)))
			}
			if !slices.EqualFunc(got, tc.want, slices.Equal) {
				t.Errorf("steps = %v, want %v", got, tc.want)
			}
			if !slices.Equal(r.killer.sent, tc.sent) {
				t.Errorf("signals = %v, want %v", r.killer.sent, tc.sent)
			}
			if !slices.Equal(term.calls, []string{"1066:11"}) {
				t.Errorf("terminate_client calls = %v, want 1066:11 only", term.calls)
			}
			if len(r.enf.Terminating()) != 0 {
				t.Errorf("still terminating %v after the process went", r.enf.Terminating())
			}
			if _, err := os.Stat(filepath.Join(r.proc.root, "10")); err != nil {
				t.Errorf("PID 10 of the same device was touched: %v", err)
			}
			// Each step is one log line naming the device, PID, figures, reason and step.
			for _, w := range tc.want {
				step := strings.SplitN(w[0], ":", 2)[1]
				if !strings.Contains(r.logs.String(), "step="+step) {
					t.Errorf("no log line for step %s in\n%s", step, r.logs)
				}
			}
			for line := range strings.Lines(r.logs.String()) {
				for _, k := range []string{"device=" + gpuA + "::0", "pid=11", "used_mib=4096", "device_used_mib=9216", "cap_mib=8192", "reason=test", "step="} {
					if !strings.Contains(line, k) {
						t.Errorf("log line %q lacks %q", line, k)
					}
				}
			}
		})
	}
}

func TestEnforcerSignalsWhenTerminateClientCannot(t *testing.T) {
	for _, tc := range []struct {
		name  string
		terms func(*fakeProc) map[gpu.UUID]Terminator
		err   string
	}{
		{"no MPS control for the GPU", func(*fakeProc) map[gpu.UUID]Terminator { return nil }, "no MPS control"},
		{"not a client of the GPU's servers", func(p *fakeProc) map[gpu.UUID]Terminator {
			return map[gpu.UUID]Terminator{gpuA: &fakeTerminator{proc: p, clients: map[int]int{}}}
		}, "not a client"},
		{"control does not answer", func(p *fakeProc) map[gpu.UUID]Terminator {
			return map[gpu.UUID]Terminator{gpuA: &fakeTerminator{proc: p, err: errors.New("mps control timed out")}}
		}, "timed out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newEnforcerRig(t)
			r.proc.add(11, 200, gpuA+"::0")
			steps := r.enf.Run(t.Context(), listing(11), []Action{action(11, 200)}, tc.terms(r.proc))
			if got := stepNames(steps); !slices.Equal(got, []string{"11:failed", "11:sigterm"}) {
				t.Fatalf("steps = %v, want failed then sigterm", got)
			}
			if steps[0].Err == nil || !strings.Contains(steps[0].Err.Error(), tc.err) {
				t.Errorf("failed step error = %v, want one with %q", steps[0].Err, tc.err)
			}
			if !slices.Equal(r.killer.sent, []string{"11:TERM"}) {
				t.Errorf("signals = %v, want 11:TERM at once", r.killer.sent)
			}
			r.clock.advance(grace)
			if got := stepNames(r.enf.Run(t.Context(), listing(), nil, tc.terms(r.proc))); !slices.Equal(got, []string{"11:gone"}) {
				t.Errorf("a grace period later: steps = %v, want 11:gone", got)
			}
		})
	}
}

func TestEnforcerNeverSignalsAReusedPID(t *testing.T) {
	r := newEnforcerRig(t)
	r.proc.add(11, 200, gpuA+"::0")
	term := &fakeTerminator{proc: r.proc, clients: map[int]int{11: 1066}}
	terms := map[gpu.UUID]Terminator{gpuA: term}
	r.enf.Run(t.Context(), listing(11), []Action{action(11, 200)}, terms)
	// PID 11 exits and an unrelated process gets the number.
	r.proc.exit(11)
	r.proc.add(11, 999, "")
	r.clock.advance(grace)
	if got := stepNames(r.enf.Run(t.Context(), listing(), nil, terms)); !slices.Equal(got, []string{"11:gone"}) {
		t.Errorf("steps = %v, want 11:gone", got)
	}
	// An action about the old process arriving late is dropped too.
	if got := stepNames(r.enf.Run(t.Context(), listing(), []Action{action(11, 200)}, terms)); !slices.Equal(got, []string{"11:gone"}) {
		t.Errorf("late action: steps = %v, want 11:gone", got)
	}
	if len(r.killer.sent) != 0 || len(term.calls) != 1 {
		t.Errorf("signals %v, terminate calls %v: the new PID 11 must not be touched", r.killer.sent, term.calls)
	}
}

func TestEnforcerDoesNotRepeatAPendingAction(t *testing.T) {
	r := newEnforcerRig(t)
	r.proc.add(11, 200, gpuA+"::0")
	term := &fakeTerminator{proc: r.proc, clients: map[int]int{11: 1066}}
	terms := map[gpu.UUID]Terminator{gpuA: term}
	r.enf.Run(t.Context(), listing(11), []Action{action(11, 200)}, terms)
	r.clock.advance(time.Second)
	if s := r.enf.Run(t.Context(), listing(11), []Action{action(11, 200)}, terms); len(s) != 0 {
		t.Errorf("second action for a pending PID: %v", stepNames(s))
	}
	if len(term.calls) != 1 {
		t.Errorf("terminate_client called %d times", len(term.calls))
	}
	r.enf.Reset(t.Context())
	if len(r.enf.Terminating()) != 0 {
		t.Error("Reset kept pending terminations")
	}
}

func TestEnforcerAsksAWedgedControlOncePerRun(t *testing.T) {
	r := newEnforcerRig(t)
	r.proc.add(11, 200, gpuA+"::0")
	r.proc.add(12, 300, gpuA+"::0")
	term := &fakeTerminator{proc: r.proc, err: errors.New("mps control timed out")}
	steps := r.enf.Run(t.Context(), listing(11, 12), []Action{action(11, 200), action(12, 300)}, map[gpu.UUID]Terminator{gpuA: term})
	if got := stepNames(steps); !slices.Equal(got, []string{"11:failed", "11:sigterm", "12:failed", "12:sigterm"}) {
		t.Errorf("steps = %v", got)
	}
	if term.lists != 1 {
		t.Errorf("ClientServers asked %d times in one Run, want once", term.lists)
	}
}
