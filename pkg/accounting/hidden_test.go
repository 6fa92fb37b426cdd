package accounting

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
)

// TestAccountantTerminatesHiddenContainerClients (issue 23): under enforce,
// a container process whose device cannot be established (its whole
// container hid its identity file: nothing in its cgroup sees one) is
// treated as over every cap and terminated, though it uses little memory;
// one whose cgroup still shows its device is billed there (and stays, its
// device under the cap); a host process that names no device, a host
// service in a mount namespace of its own (the host's root directory), and
// a process the daemon cannot place because it could not read the host's
// mount namespace, are reported and never touched. Under report nobody is.
func TestAccountantTerminatesHiddenContainerClients(t *testing.T) {
	proc := newFakeProc(t)
	a0 := gpuA + "::0"
	proc.give("a", a0)
	proc.addContainer(10, 1, 100, "a", a0)  // a's first process, sees its file
	proc.addHidden(11, 1, 110, "a", a0)     // exec'd into a, hid: a's cgroup shows a0
	proc.addHidden(20, 1, 200, "hider", a0) // its container's first process hid: nothing shows
	proc.add(30, 300, "")                   // the host's own job, no device named
	// A host service in a mount namespace of its own: the host's root.
	proc.process(31, 1, 310, a0, "0::/system.slice/cuda.service\n", proc.mountNS("svc"), "/")
	killer := &fakeKiller{proc: proc, ignoreTERM: map[int]bool{}}
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	var logs bytes.Buffer
	acct := New(Options{ProcRoot: proc.root, Identities: proc.store.Table, Grace: grace, Killer: killer, Now: clock.now,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	caps := map[string]uint64{a0: 20 * gib}
	term := &fakeTerminator{proc: proc, clients: map[int]int{10: 1, 11: 1, 20: 1, 30: 1, 31: 1}}
	terms := map[gpu.UUID]Terminator{gpuA: term}
	procs := map[gpu.UUID][]gpu.Process{gpuA: {{PID: 10, UsedMemoryBytes: gib}, {PID: 11, UsedMemoryBytes: gib},
		{PID: 20, UsedMemoryBytes: gib}, {PID: 30, UsedMemoryBytes: 30 * gib}, {PID: 31, UsedMemoryBytes: 30 * gib}}}

	r := acct.Tick(t.Context(), config.AccountingReport, procs, caps, nil, terms)
	if len(r.Steps) != 0 {
		t.Fatalf("report: steps %v, want none", stepNames(r.Steps))
	}
	if d := r.Usage.PerDevice[a0]; !slices.Equal(d.PIDs, []int{10, 11}) {
		t.Errorf("%s billed %v, want 10 and 11 (by its cgroup)", a0, d.PIDs)
	}
	hidden := map[int]bool{}
	for _, u := range r.Usage.Unknown {
		hidden[u.PID] = u.Hidden
	}
	if len(hidden) != 3 || !hidden[20] || hidden[30] || hidden[31] {
		t.Errorf("unknown %+v, want 20 (hidden), 30 and 31 (the host's, not hidden)", r.Usage.Unknown)
	}

	r = acct.Tick(t.Context(), config.AccountingEnforce, procs, caps, nil, terms)
	if got := stepNames(r.Steps); !slices.Equal(got, []string{"20:terminate_client"}) {
		t.Fatalf("enforce: steps %v, want 20 alone terminated", got)
	}
	if s := r.Steps[0]; s.Cause != CauseNoDevice || s.Device != "" || !strings.Contains(s.Reason, "no device can be established") {
		t.Errorf("step %+v", s)
	}
	out := logs.String()
	for _, w := range []string{"terminated under enforce", "cause=no_device", "terminating container client without a device"} {
		if !strings.Contains(out, w) {
			t.Errorf("the log does not say %q:\n%s", w, out)
		}
	}
	clock.advance(grace + time.Second)
	acct.Tick(t.Context(), config.AccountingEnforce, procs, caps, nil, terms)
	for _, s := range killer.sent {
		if !strings.HasPrefix(s, "20:") {
			t.Errorf("signalled %s: only the hidden container process may be", s)
		}
	}

	// With the single pipe layout (Cloudpods' pods reach MPS without an
	// identity file), a container client without a device is reported only.
	proc.addHidden(21, 1, 210, "pod", a0)
	procs[gpuA] = append(procs[gpuA], gpu.Process{PID: 21, UsedMemoryBytes: gib})
	acct.SetIdentityRequired(false)
	r = acct.Tick(t.Context(), config.AccountingEnforce, procs, caps, nil, terms)
	for _, s := range r.Steps {
		if s.PID == 21 {
			t.Errorf("single layout: PID 21 terminated: %+v", s)
		}
	}
	if i := slices.IndexFunc(r.Usage.Unknown, func(u UnknownProcess) bool { return u.PID == 21 }); i < 0 || r.Usage.Unknown[i].Hidden ||
		!strings.Contains(r.Usage.Unknown[i].Reason, "single pipe layout") {
		t.Errorf("single layout: unknown %+v, want PID 21 reported, not hidden", r.Usage.Unknown)
	}
	acct.SetIdentityRequired(true)

	// Without PID 1's mount namespace nobody can be told apart from the
	// host's processes: a process without identity is never terminated.
	proc.addHidden(40, 1, 400, "other", a0)
	if err := os.Remove(filepath.Join(proc.root, "1", "ns", "mnt")); err != nil {
		t.Fatal(err)
	}
	procs[gpuA] = append(procs[gpuA], gpu.Process{PID: 40, UsedMemoryBytes: gib})
	r = acct.Tick(t.Context(), config.AccountingEnforce, procs, caps, nil, terms)
	for _, s := range r.Steps {
		if s.PID == 40 {
			t.Errorf("PID 40 terminated while the host's namespace is unknown: %+v", s)
		}
	}
	i := slices.IndexFunc(r.Usage.Unknown, func(u UnknownProcess) bool { return u.PID == 40 })
	if i < 0 || r.Usage.Unknown[i].Hidden || !strings.Contains(r.Usage.Unknown[i].Reason, "never terminated") {
		t.Errorf("unknown %+v, want PID 40 reported as not known to be in a container", r.Usage.Unknown)
	}
}
