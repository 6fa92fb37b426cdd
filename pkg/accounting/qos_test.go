package accounting

import (
	"bytes"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/clientreport"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/pci"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

func TestParseQoSEnviron(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want clientreport.QoSEnv
	}{
		{"none", env("PATH=/usr/bin"), clientreport.QoSEnv{}},
		{"both", env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=13", "CUDA_MPS_CLIENT_PRIORITY=1"),
			clientreport.QoSEnv{ThreadPercentage: clientreport.EnvValue{Value: "13", Set: true}, ClientPriority: clientreport.EnvValue{Value: "1", Set: true}}},
		{"empty value is set", env("CUDA_MPS_CLIENT_PRIORITY="), clientreport.QoSEnv{ClientPriority: clientreport.EnvValue{Set: true}}},
		{"twice, same value", env("CUDA_MPS_CLIENT_PRIORITY=1", "CUDA_MPS_CLIENT_PRIORITY=1"), clientreport.QoSEnv{ClientPriority: clientreport.EnvValue{Value: "1", Set: true}}},
		{"twice, two values", env("CUDA_MPS_CLIENT_PRIORITY=1", "CUDA_MPS_CLIENT_PRIORITY=0"), clientreport.QoSEnv{ClientPriority: clientreport.EnvValue{Value: "0", Set: true, Twice: true}}},
		{"names that only start alike", env("CUDA_MPS_CLIENT_PRIORITY_X=0", "XCUDA_MPS_CLIENT_PRIORITY=0", "CUDA_MPS_CLIENT_PRIORITY"), clientreport.QoSEnv{}},
		{"a huge value is cut for display", env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" + strings.Repeat("9", 500)),
			clientreport.QoSEnv{ThreadPercentage: clientreport.EnvValue{Value: strings.Repeat("9", 120) + "...", Set: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ParseQoSEnviron(tc.in); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A batch device of 13% and priority 1 on a GPU whose control daemon holds
// 50% and priority 1 (N=8 under auto, slice 0 latency).
var batch13 = DeviceQoS{ThreadPercentage: 13, ClientPriority: 1, Server: vdev.ServerDefaults{ThreadPercentage: 50, ClientPriority: 1}}

func TestCheckQoS(t *testing.T) {
	set := func(v string) clientreport.EnvValue { return clientreport.EnvValue{Value: v, Set: true} }
	for _, tc := range []struct {
		name string
		env  clientreport.QoSEnv
		q    DeviceQoS
		want string // "" for no escape, else a part of the reason
	}{
		{"as the spec gives it", clientreport.QoSEnv{ThreadPercentage: set("13"), ClientPriority: set("1")}, batch13, ""},
		{"lower share, still below normal", clientreport.QoSEnv{ThreadPercentage: set("5"), ClientPriority: set("1")}, batch13, ""},
		{"13.0 is 13", clientreport.QoSEnv{ThreadPercentage: set(" 13.0 "), ClientPriority: set("1")}, batch13, ""},
		{"no priority variable: the server's default 1 holds", clientreport.QoSEnv{ThreadPercentage: set("13")}, batch13, ""},
		{"no thread variable: the server's 50%", clientreport.QoSEnv{ClientPriority: set("1")}, batch13, "no CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: it gets the server's 50%, its device's share is 13%"},
		{"raised share", clientreport.QoSEnv{ThreadPercentage: set("40"), ClientPriority: set("1")}, batch13, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40 is above its device's share, 13%"},
		{"asks 100: capped at 50 by MPS, still above", clientreport.QoSEnv{ThreadPercentage: set("100"), ClientPriority: set("1")}, batch13, "above its device's share"},
		{"13.5", clientreport.QoSEnv{ThreadPercentage: set("13.5"), ClientPriority: set("1")}, batch13, "above its device's share"},
		{"not a number", clientreport.QoSEnv{ThreadPercentage: set("lots"), ClientPriority: set("1")}, batch13, `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="lots" is not a percentage`},
		{"zero", clientreport.QoSEnv{ThreadPercentage: set("0"), ClientPriority: set("1")}, batch13, "is not a percentage"},
		{"priority raised", clientreport.QoSEnv{ThreadPercentage: set("13"), ClientPriority: set("0")}, batch13, "CUDA_MPS_CLIENT_PRIORITY=0 raises it above its device's priority 1"},
		{"priority garbage", clientreport.QoSEnv{ThreadPercentage: set("13"), ClientPriority: set("high")}, batch13, `CUDA_MPS_CLIENT_PRIORITY="high" is not 0 or 1`},
		{"priority twice", clientreport.QoSEnv{ThreadPercentage: set("13"), ClientPriority: clientreport.EnvValue{Value: "1", Set: true, Twice: true}}, batch13, "CUDA_MPS_CLIENT_PRIORITY is set twice"},
		{"both stripped, server at priority 0", clientreport.QoSEnv{}, DeviceQoS{ThreadPercentage: 13, ClientPriority: 1, Server: vdev.ServerDefaults{ThreadPercentage: 50}},
			"no CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: it gets the server's 50%, its device's share is 13%; no CUDA_MPS_CLIENT_PRIORITY: it gets the server's priority 0, its device's is 1"},
		{"share equal to the server's: no thread variable needed", clientreport.QoSEnv{ClientPriority: set("1")},
			DeviceQoS{ThreadPercentage: 12, ClientPriority: 1, Server: vdev.ServerDefaults{ThreadPercentage: 12, ClientPriority: 1}}, ""},
		{"unreadable environment", clientreport.QoSEnv{Unreadable: "environ is larger than 1048576 bytes"}, batch13, "its environment cannot be read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckQoS(tc.env, tc.q)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("CheckQoS = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBatchQoS(t *testing.T) {
	g := gpu.Info{UUID: gpuA, PCI: pci.Address{Bus: 0x1a}, MemoryTotal: 81559 << 20}
	devs := vdev.Split(g, 4, 100, vdev.QoS{LatencySlices: []int{0}, ReservePercent: 8})
	server := vdev.DefaultsOf(devs)
	got := BatchQoS(devs, server)
	want := DeviceQoS{ThreadPercentage: 30, ClientPriority: 1, Server: vdev.ServerDefaults{ThreadPercentage: 30, ClientPriority: 1}}
	if len(got) != 3 || got[gpuA+"::1"] != want || got[gpuA+"::3"] != want {
		t.Errorf("got %+v, want slices 1-3 at %+v", got, want)
	}
	if _, ok := got[gpuA+"::0"]; ok {
		t.Error("the latency slice is checked")
	}
	if n := len(BatchQoS(vdev.Split(g, 4, config.AutoThreads.Percentage(4), vdev.QoS{}), vdev.ServerDefaults{ThreadPercentage: 100})); n != 0 {
		t.Errorf("a GPU without mps_qos has %d checked devices", n)
	}
}

// TestAccountantTerminatesQoSEscapes: on a GPU whose slice 0 is a latency
// slice and 1-2 batch slices, the clients of batch devices that were
// started with their device's environment run on; one started without
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and one that raised its priority are
// reported once each and, under enforce, terminated, though their device is
// far under its memory cap; a latency device's client without any QoS
// variable is never touched. Under report, nobody is.
func TestAccountantTerminatesQoSEscapes(t *testing.T) {
	proc := newFakeProc(t)
	lat, b1, b2 := gpuA+"::0", gpuA+"::1", gpuA+"::2"
	for ctr, dev := range map[string]string{"l": lat, "b1": b1, "b2": b2} {
		proc.give(ctr, dev)
	}
	withEnv := func(pid, ppid int, start uint64, ctr, dev string, extra ...string) {
		proc.addContainer(pid, ppid, start, ctr, dev)
		proc.write(pid, "environ", env(append([]string{"PATH=/usr/bin", vdev.EnvVar + "=" + dev}, extra...)...))
	}
	withEnv(10, 1, 100, "l", lat)                                                                               // latency: nothing needed
	withEnv(20, 1, 200, "b1", b1, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30", "CUDA_MPS_CLIENT_PRIORITY=1")         // as given
	withEnv(21, 20, 210, "b1", b1, "CUDA_MPS_CLIENT_PRIORITY=1")                                                // env -u the share
	withEnv(30, 1, 300, "b2", b2, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30", "CUDA_MPS_CLIENT_PRIORITY=0")         // raised its priority
	withEnv(31, 30, 310, "b2", b2, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=20", "CUDA_MPS_CLIENT_PRIORITY=1", "X=1") // lowered: fine
	killer := &fakeKiller{proc: proc, ignoreTERM: map[int]bool{}}
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	var logs bytes.Buffer
	acct := New(Options{ProcRoot: proc.root, Identities: proc.store.Table, Grace: grace, Killer: killer, Now: clock.now,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	caps := map[string]uint64{lat: 20 * gib, b1: 20 * gib, b2: 20 * gib}
	server := vdev.ServerDefaults{ThreadPercentage: 100, ClientPriority: 1}
	q := DeviceQoS{ThreadPercentage: 30, ClientPriority: 1, Server: server}
	qos := map[string]DeviceQoS{b1: q, b2: q}
	term := &fakeTerminator{proc: proc, clients: map[int]int{10: 1, 20: 1, 21: 1, 30: 1, 31: 1}}
	terms := map[gpu.UUID]Terminator{gpuA: term}
	procs := map[gpu.UUID][]gpu.Process{gpuA: {{PID: 10, UsedMemoryBytes: gib}, {PID: 20, UsedMemoryBytes: gib},
		{PID: 21, UsedMemoryBytes: gib}, {PID: 30, UsedMemoryBytes: gib}, {PID: 31, UsedMemoryBytes: gib}}}

	r := acct.Tick(t.Context(), config.AccountingReport, procs, caps, qos, terms)
	var pids []int
	for _, e := range r.Usage.Escapes {
		pids = append(pids, e.PID)
	}
	if !slices.Equal(pids, []int{21, 30}) || len(r.Steps) != 0 || len(r.Decision.Over) != 0 {
		t.Fatalf("report: escapes %v (%+v), steps %v; want 21 and 30 reported, nobody touched", pids, r.Usage.Escapes, r.Steps)
	}
	if e := r.Usage.Escapes[0]; e.Device != b1 || e.Source != SourceIdentity || !strings.Contains(e.Reason, "no CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") {
		t.Errorf("escape %+v", e)
	}

	r = acct.Tick(t.Context(), config.AccountingEnforce, procs, caps, qos, terms)
	if got := stepNames(r.Steps); !slices.Equal(got, []string{"21:terminate_client", "30:terminate_client"}) {
		t.Errorf("steps %v, want 21 and 30 terminated", got)
	}
	for _, s := range r.Steps {
		if s.Cause != CauseQoS {
			t.Errorf("step %+v: cause %q, want %q", s, s.Cause, CauseQoS)
		}
	}
	clock.advance(grace + time.Second)
	acct.Tick(t.Context(), config.AccountingEnforce, procs, caps, qos, terms)
	for _, s := range killer.sent {
		if !strings.HasPrefix(s, "21:") && !strings.HasPrefix(s, "30:") {
			t.Errorf("signalled %s: only the escapes may be", s)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "escapes its device's QoS or memory limit"); n != 2 {
		t.Errorf("%d escape lines, want one per process (2):\n%s", n, out)
	}
	if !strings.Contains(out, "terminating client escaping its device's QoS") || !strings.Contains(out, "cause=qos_escape") {
		t.Errorf("enforcement's log lines do not say why:\n%s", out)
	}
}

// Size alone never makes an escape (issue 23): a compliant batch client
// whose environment is larger than any buffer the accounting keeps (its
// variables last, behind megabytes of others) is read whole and passes;
// the same with its share dropped is an escape for that, not for its size.
func TestHugeEnvironmentIsReadWhole(t *testing.T) {
	proc := newFakeProc(t)
	b1 := gpuA + "::1"
	proc.give("b", b1)
	proc.addContainer(40, 1, 400, "b", b1)
	proc.addContainer(41, 1, 401, "b", b1)
	pad := make([]string, 0, 40)
	for i := range 40 { // 40 x 128 KiB: 5 MiB, near what execve takes
		pad = append(pad, fmt.Sprintf("PAD%d=%s", i, strings.Repeat("x", 128<<10)))
	}
	proc.write(40, "environ", env(append(pad, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=13", "CUDA_MPS_CLIENT_PRIORITY=1")...))
	proc.write(41, "environ", env(append(pad, "CUDA_MPS_CLIENT_PRIORITY=1")...))
	acct := New(Options{ProcRoot: proc.root, Identities: proc.store.Table})
	r := acct.Tick(t.Context(), config.AccountingReport, map[gpu.UUID][]gpu.Process{gpuA: {{PID: 40, UsedMemoryBytes: gib}, {PID: 41, UsedMemoryBytes: gib}}},
		map[string]uint64{b1: 20 * gib}, map[string]DeviceQoS{b1: batch13}, nil)
	if len(r.Usage.Escapes) != 1 || r.Usage.Escapes[0].PID != 41 || !strings.Contains(r.Usage.Escapes[0].Reason, "no CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") {
		t.Errorf("escapes %+v, want PID 41 alone, for its missing share", r.Usage.Escapes)
	}
}
