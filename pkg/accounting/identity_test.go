package accounting

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
)

// TestAccountantBillsLiarsByTheirIdentity is the escape of issue 14 on
// simulated clients: in a container given A::0, a second process rewrites
// its environment to name the neighbour's device A::1, a third drops it,
// and a fourth hides its view of the container. Billed by their identity
// files they push A::0 over its cap; the one that grew most (the newest)
// is terminated, and A::1's own process, newer still, is never the victim,
// as it would have been had the environment been believed. Each
// disagreement is reported once.
func TestAccountantBillsLiarsByTheirIdentity(t *testing.T) {
	proc := newFakeProc(t)
	a0, a1 := gpuA+"::0", gpuA+"::1"
	proc.give("x", a0)
	proc.give("y", a1)
	proc.addContainer(10, 1, 100, "x", a0)  // keeps its environment
	proc.addContainer(11, 10, 200, "x", a1) // YUNION_MPS_VIRTUAL_DEVICE=<A::1>
	proc.addContainer(12, 10, 210, "x", "") // env -u YUNION_MPS_VIRTUAL_DEVICE
	proc.addHidden(13, 10, 220, "x", a1)    // unshare + pivot_root, and a lie
	proc.addContainer(20, 1, 300, "y", a1)  // the neighbour, newest of all
	killer := &fakeKiller{proc: proc, ignoreTERM: map[int]bool{}}
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	var logs bytes.Buffer
	acct := New(Options{ProcRoot: proc.root, Identities: proc.store.Table, Grace: grace, Killer: killer, Now: clock.now,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	caps := map[string]uint64{a0: 8 * gib, a1: 8 * gib}
	term := &fakeTerminator{proc: proc, clients: map[int]int{10: 1, 11: 1, 12: 1, 13: 1, 20: 1}}
	terms := map[gpu.UUID]Terminator{gpuA: term}
	procs := map[gpu.UUID][]gpu.Process{gpuA: {
		{PID: 10, UsedMemoryBytes: 3 * gib}, {PID: 11, UsedMemoryBytes: 3 * gib}, {PID: 12, UsedMemoryBytes: 1 * gib},
		{PID: 13, UsedMemoryBytes: 2 * gib}, {PID: 20, UsedMemoryBytes: 5 * gib},
	}}

	r := acct.Tick(t.Context(), config.AccountingEnforce, procs, caps, nil, terms)
	if got := r.Usage.PerDevice[a0]; got.UsedBytes != 9*gib || !slices.Equal(got.PIDs, []int{10, 11, 12, 13}) {
		t.Errorf("%s = %+v; want PIDs 10-13 at 9 GiB, billed by their identity", a0, got)
	}
	if got := r.Usage.PerDevice[a1]; got.UsedBytes != 5*gib || !slices.Equal(got.PIDs, []int{20}) {
		t.Errorf("%s = %+v; want PID 20 alone: the liar's memory is not its neighbour's", a1, got)
	}
	if len(r.Decision.Over) != 1 || r.Decision.Over[0].Device != a0 {
		t.Fatalf("over = %+v, want %s alone", r.Decision.Over, a0)
	}
	// No earlier sample: the newest of A::0's clients goes, never PID 20.
	if got := stepNames(r.Steps); !slices.Equal(got, []string{"13:terminate_client"}) {
		t.Errorf("steps = %v, want 13:terminate_client", got)
	}
	var mism []int
	for _, m := range r.Usage.Mismatches {
		mism = append(mism, m.PID)
		if m.Device != a0 {
			t.Errorf("mismatch %+v: billed to %s, want %s", m, m.Device, a0)
		}
	}
	if !slices.Equal(mism, []int{11, 12, 13}) {
		t.Errorf("mismatches %v, want 11 (rewrote), 12 (unset), 13 (hid)", mism)
	}

	clock.advance(time.Second)
	acct.Tick(t.Context(), config.AccountingEnforce, procs, caps, nil, terms)
	out := logs.String()
	if n := strings.Count(out, "disagrees with its identity file"); n != 3 {
		t.Errorf("%d mismatch lines, want one per process (3):\n%s", n, out)
	}
	for _, want := range []string{"environment=" + a1, "its environment names no device", "its own view hides its identity file"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	for _, s := range killer.sent {
		if strings.HasPrefix(s, "20:") {
			t.Errorf("the neighbour's process was signalled: %v", killer.sent)
		}
	}
}
