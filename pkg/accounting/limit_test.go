package accounting

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/clientreport"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// TestCheckMemoryLimit: what a client's own CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
// may be, after docs/gpu-runs/mps-probe-limits.txt: what the CDI edits give
// and lower values of its own GPU pass; every list MPS cannot take, which
// lifts its limit altogether, is an escape.
func TestCheckMemoryLimit(t *testing.T) {
	own := strings.TrimPrefix(string(gpuA), "GPU-")
	for _, c := range []struct {
		name   string
		v      clientreport.EnvValue
		escape bool
	}{
		{"unset", clientreport.EnvValue{}, false},
		{"empty", clientreport.EnvValue{Set: true}, false},
		{"the spec's", clientreport.EnvValue{Set: true, Value: "0=35942M"}, false},
		{"lowered, by UUID", clientreport.EnvValue{Set: true, Value: string(gpuA) + "=2048M"}, false},
		{"in G", clientreport.EnvValue{Set: true, Value: "0=16G"}, false},
		{"its UUID in upper case", clientreport.EnvValue{Set: true, Value: "GPU-" + strings.ToUpper(own) + "=1G"}, false},
		{"an ordinal it does not see", clientreport.EnvValue{Set: true, Value: "1=2048M"}, true},
		{"another GPU's UUID", clientreport.EnvValue{Set: true, Value: string(gpuB) + "=2048M"}, true},
		{"garbage", clientreport.EnvValue{Set: true, Value: "x"}, true},
		{"0=0", clientreport.EnvValue{Set: true, Value: "0=0"}, true},
		{"no unit", clientreport.EnvValue{Set: true, Value: "0=2048"}, true},
		{"no ordinal", clientreport.EnvValue{Set: true, Value: "2048M"}, true},
		{"its own, then one it does not see", clientreport.EnvValue{Set: true, Value: "0=2048M,1=1M"}, true},
		{"gpu- in lower case", clientreport.EnvValue{Set: true, Value: "gpu-" + own + "=1G"}, true},
		{"a negative size", clientreport.EnvValue{Set: true, Value: "0=-1M"}, true},
		{"set twice", clientreport.EnvValue{Set: true, Value: "0=1G", Twice: true}, true},
		{"its GPU named twice, low then high", clientreport.EnvValue{Set: true, Value: "0=1M,0=999999M"}, true},
		{"its GPU named twice, by ordinal and UUID", clientreport.EnvValue{Set: true, Value: "0=1G," + string(gpuA) + "=2G"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			why := CheckMemoryLimit(clientreport.QoSEnv{MemoryLimit: c.v}, DeviceLimit{GPU: gpuA})
			if (why != "") != c.escape {
				t.Errorf("CheckMemoryLimit(%+v) = %q; escape %v", c.v, why, c.escape)
			}
		})
	}
	if why := CheckMemoryLimit(clientreport.QoSEnv{Unreadable: "too long"}, DeviceLimit{GPU: gpuA}); !strings.Contains(why, "cannot be read") {
		t.Errorf("an unreadable environment: %q, want an escape", why)
	}
}

// TestCheckMemoryLimitAgainstTheServer: where a client's control daemon
// holds more than its device's cap (a GPU shared by claims of any size: the
// whole GPU; the single layout's ordinal 0: the largest cap), the limit it
// ends up with must be within its device's cap; where the daemon holds the
// cap itself, dropping or raising the variable changes nothing.
func TestCheckMemoryLimitAgainstTheServer(t *testing.T) {
	set := func(v string) clientreport.EnvValue { return clientreport.EnvValue{Set: true, Value: v} }
	claim := DeviceLimit{GPU: gpuA, Cap: 20480, Server: 143771, ServerKnown: true}
	slice := DeviceLimit{GPU: gpuA, Cap: 35942, Server: 35942, ServerKnown: true}
	for _, c := range []struct {
		name   string
		v      clientreport.EnvValue
		d      DeviceLimit
		escape bool
	}{
		{"a claim's own entry", set("0=20480M"), claim, false},
		{"a claim lowered further", set("0=1G"), claim, false},
		{"a claim without the variable: the whole GPU", clientreport.EnvValue{}, claim, true},
		{"a claim with it empty: the whole GPU", set(""), claim, true},
		{"a claim raised", set("0=40G"), claim, true},
		{"a slice without the variable: the daemon's cap", clientreport.EnvValue{}, slice, false},
		{"a slice raised: the daemon's cap", set("0=80G"), slice, false},
		{"a daemon without a limit", clientreport.EnvValue{}, DeviceLimit{GPU: gpuA, Cap: 20480, ServerKnown: true}, true},
		{"the server not known: only the list is checked", clientreport.EnvValue{}, DeviceLimit{GPU: gpuA, Cap: 20480}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if why := CheckMemoryLimit(clientreport.QoSEnv{MemoryLimit: c.v}, c.d); (why != "") != c.escape {
				t.Errorf("CheckMemoryLimit(%+v, %+v) = %q; escape %v", c.v, c.d, why, c.escape)
			}
		})
	}
}

// TestAccountantTerminatesMemoryLimitEscapes: on a GPU without mps_qos, a
// client started with its device's environment runs on, as does one that
// lowered its limit; one whose list names an ordinal it does not see (MPS
// then holds it to nothing) is reported once and, under enforce,
// terminated though its device is far under its cap, with its own cause.
func TestAccountantTerminatesMemoryLimitEscapes(t *testing.T) {
	proc := newFakeProc(t)
	dev := gpuA + "::0"
	proc.give("c", dev)
	withEnv := func(pid int, start uint64, extra ...string) {
		proc.addContainer(pid, 1, start, "c", dev)
		proc.write(pid, "environ", env(append([]string{"PATH=/usr/bin", vdev.EnvVar + "=" + dev}, extra...)...))
	}
	withEnv(10, 100, vdev.EnvMemoryLimit+"=0=20480M")
	withEnv(11, 110, vdev.EnvMemoryLimit+"=0=1024M")
	withEnv(12, 120, vdev.EnvMemoryLimit+"=1=1M")
	killer := &fakeKiller{proc: proc, ignoreTERM: map[int]bool{}}
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	var logs bytes.Buffer
	acct := New(Options{ProcRoot: proc.root, Identities: proc.store.Table, Grace: grace, Killer: killer, Now: clock.now,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	caps := map[string]uint64{dev: 20 * gib}
	term := &fakeTerminator{proc: proc, clients: map[int]int{10: 1, 11: 1, 12: 1}}
	terms := map[gpu.UUID]Terminator{gpuA: term}
	procs := map[gpu.UUID][]gpu.Process{gpuA: {{PID: 10, UsedMemoryBytes: gib}, {PID: 11, UsedMemoryBytes: gib}, {PID: 12, UsedMemoryBytes: gib}}}

	r := acct.Tick(t.Context(), config.AccountingReport, procs, caps, nil, terms)
	if len(r.Usage.Escapes) != 1 || r.Usage.Escapes[0].PID != 12 || !strings.Contains(r.Usage.Escapes[0].Reason, "no limit at all") || len(r.Steps) != 0 {
		t.Fatalf("report: escapes %+v, steps %v; want 12 reported, nobody touched", r.Usage.Escapes, r.Steps)
	}
	if got := r.Usage.Escapes[0].Environment.MemoryLimit; got.Value != "1=1M" || !got.Set {
		t.Errorf("the escape's environment shows %+v, want its list", got)
	}
	r = acct.Tick(t.Context(), config.AccountingEnforce, procs, caps, nil, terms)
	if got := stepNames(r.Steps); !slices.Equal(got, []string{"12:terminate_client"}) || r.Steps[0].Cause != CauseLimit {
		t.Fatalf("steps %+v, want 12 terminated for %s", r.Steps, CauseLimit)
	}
	out := logs.String()
	if n := strings.Count(out, "escapes its device's QoS or memory limit"); n != 1 {
		t.Errorf("%d escape lines, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "terminating client escaping its device's memory limit") || !strings.Contains(out, "cause=limit_escape") {
		t.Errorf("enforcement's log lines do not say why:\n%s", out)
	}
}
