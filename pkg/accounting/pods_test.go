package accounting

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/pod"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// podRig is an Accountant over a fake /proc whose pods' containers
// containerd keeps in a state directory beside it, read by pkg/pod's real
// Finder, as a Cloudpods host has them.
type podRig struct {
	proc   *fakeProc
	state  string
	killer *fakeKiller
	clock  *fakeClock
	logs   *bytes.Buffer
	acct   *Accountant
	term   *fakeTerminator
}

func newPodRig(t testing.TB) *podRig {
	r := &podRig{proc: newFakeProc(t), clock: &fakeClock{t: time.Unix(1_800_000_000, 0)}, logs: &bytes.Buffer{}}
	r.state = filepath.Join(filepath.Dir(r.proc.root), "containerd")
	r.killer = &fakeKiller{proc: r.proc, ignoreTERM: map[int]bool{}}
	r.term = &fakeTerminator{proc: r.proc, clients: map[int]int{}, exitOnTerminate: true}
	finder := pod.NewFinder(pod.Options{CgroupParent: pod.DefaultCgroupParent, StateDir: r.state})
	r.acct = New(Options{ProcRoot: r.proc.root, Identities: r.proc.store.Table, Pods: finder, Grace: grace, Killer: r.killer,
		Now: r.clock.now, Uptime: func() time.Duration { return rigUptime }, Log: slog.New(slog.NewTextHandler(r.logs, nil))})
	r.acct.SetIdentityRequired(false) // the single layout, where pods reach MPS
	return r
}

// container makes containerd's bundle of container ctr of the pod of
// server (named name), as CRI writes it.
func (r *podRig) container(t testing.TB, ctr, server, name string) {
	dir := filepath.Join(r.state, "io.containerd.runtime.v2.task", "k8s.io", ctr)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := `{"annotations":{"io.kubernetes.cri.container-type":"container","io.kubernetes.cri.sandbox-uid":"` + server +
		`","io.kubernetes.cri.sandbox-name":"` + name + `"},"linux":{"cgroupsPath":"/cloudpods/` + ctr + `"}}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
}

// process makes a process of container ctr as Cloudpods starts one: its
// own mount namespace and root, no identity file, the pipe root in its
// environment and whatever else extra says; below is a sub-cgroup it
// made ("" none). It connects to the MPS control as client.
func (r *podRig) process(pid int, start uint64, ctr, below string, extra ...string) {
	cg := "0::/cloudpods/" + ctr
	if below != "" {
		cg += "/" + below
	}
	r.proc.process(pid, 1, start, "", cg+"\n", r.proc.mountNS("pod-"+ctr+below), r.proc.t.TempDir())
	r.proc.write(pid, "environ", env(append([]string{"PATH=/usr/bin", "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps/pipe",
		"NVIDIA_VISIBLE_DEVICES=" + gpuA, "NVIDIA_DRIVER_CAPABILITIES=all"}, extra...)...))
	r.term.clients[pid] = 1
}

// The pods of Cloudpods' servers are held to the slices their servers
// hold, summed over their processes whatever namespaces those made: one
// over its cap loses a process (the one that grew most), named by its
// server; one within its two slices is untouched; a server the region's
// GPU rows list by name is found by the sandbox's name; a pod whose
// server holds no slice of the GPU, and one whose server cannot be read,
// are reported and never terminated, saying why.
func TestPodsHeldToTheirServersSlices(t *testing.T) {
	r := newPodRig(t)
	const (
		over, within, byName, none, unread = "c0ver", "w1thin", "byname", "n0ne", "unread"
		s1, s2, s3, s4                     = "server-1", "server-2", "server-3", "server-4"
	)
	r.container(t, over, s1, "pod-one")
	r.container(t, within, s2, "pod-two")
	r.container(t, byName, s3, "pod-three")
	r.container(t, none, s4, "pod-four")
	r.process(50, 500, over, "")
	r.process(51, 510, over, "mine") // exec'd, in a sub-cgroup and a namespace of its own
	r.process(60, 600, within, "")
	r.process(61, 610, within, "")
	r.process(70, 700, byName, "")
	r.process(80, 800, none, "")
	r.process(90, 900, unread, "")
	slice := 20 * gib
	caps := map[string]uint64{
		gpuA + "::0": slice, gpuA + "::1": slice, gpuA + "::2": slice, gpuA + "::3": slice,
		PodName(gpuA, s1): slice, PodName(gpuA, s2): 2 * slice, PodName(gpuA, "pod-three"): slice,
	}
	terms := map[gpu.UUID]Terminator{gpuA: r.term}
	procs := map[gpu.UUID][]gpu.Process{gpuA: {
		{PID: 50, UsedMemoryBytes: 12 * gib}, {PID: 51, UsedMemoryBytes: 6 * gib},
		{PID: 60, UsedMemoryBytes: 14 * gib}, {PID: 61, UsedMemoryBytes: 14 * gib},
		{PID: 70, UsedMemoryBytes: 4 * gib}, {PID: 80, UsedMemoryBytes: 30 * gib}, {PID: 90, UsedMemoryBytes: 30 * gib},
	}}
	rep := r.acct.Tick(t.Context(), config.AccountingEnforce, procs, caps, nil, terms)
	if len(rep.Steps) != 0 {
		t.Fatalf("steps %v while every pod is under its cap", stepNames(rep.Steps))
	}
	for name, pids := range map[string][]int{PodName(gpuA, s1): {50, 51}, PodName(gpuA, s2): {60, 61}, PodName(gpuA, "pod-three"): {70}} {
		d := rep.Usage.PerDevice[name]
		if !slices.Equal(d.PIDs, pids) {
			t.Errorf("%s billed %v, want %v", name, d.PIDs, pids)
		}
		for _, c := range d.Clients {
			if c.Source != SourcePod || c.Pod.Server == "" {
				t.Errorf("%s: client %+v", name, c)
			}
		}
	}
	if len(rep.Usage.Mismatches) != 0 {
		t.Errorf("pods' clients reported as mismatched: %+v", rep.Usage.Mismatches)
	}
	unknown := map[int]UnknownProcess{}
	for _, u := range rep.Usage.Unknown {
		unknown[u.PID] = u
	}
	if u, ok := unknown[80]; !ok || u.Server != s4 || !strings.Contains(u.Reason, "holds no slice") || !strings.Contains(u.Reason, "never terminated") {
		t.Errorf("PID 80 (server holding nothing): %+v", u)
	}
	if u, ok := unknown[90]; !ok || u.Hidden || !strings.Contains(u.Reason, "its server cannot be established") {
		t.Errorf("PID 90 (no bundle): %+v", u)
	}
	if len(unknown) != 2 {
		t.Errorf("unknown %+v, want 80 and 90", rep.Usage.Unknown)
	}

	// Pod one's second process grows past the one slice its server holds.
	procs[gpuA][1].UsedMemoryBytes = 10 * gib
	rep = r.acct.Tick(t.Context(), config.AccountingEnforce, procs, caps, nil, terms)
	if got := stepNames(rep.Steps); !slices.Equal(got, []string{"51:terminate_client"}) {
		t.Fatalf("steps %v, want 51 terminated", got)
	}
	s := rep.Steps[0]
	if s.Server != s1 || s.Device != PodName(gpuA, s1) || s.Cause != CauseMemory || s.CapBytes != slice {
		t.Errorf("step %+v", s)
	}
	if len(rep.Decision.Over) != 1 || rep.Decision.Over[0].Device != PodName(gpuA, s1) {
		t.Errorf("over %+v", rep.Decision.Over)
	}
	out := r.logs.String()
	for _, w := range []string{"Cloudpods pod over its server's memory cap", "server=" + s1, "terminating Cloudpods pod's client over its server's cap"} {
		if !strings.Contains(out, w) {
			t.Errorf("the log does not say %q:\n%s", w, out)
		}
	}
	for _, sent := range r.killer.sent {
		t.Errorf("signalled %s: terminate_client was enough", sent)
	}
}

// A pod's process whose environment lifts its MPS memory limit is killed
// as it connects, in the single layout where its control daemon serves
// every GPU, and named by its server; one without a limit of its own, or
// lowering it, is left alone (it gets its GPU's own slice cap from its
// ordinal, within its pod's); a pod whose server holds no slice is not
// killed.
func TestPodLimitEscapeKilledAtConnect(t *testing.T) {
	r := newPodRig(t)
	r.container(t, "ctr1", "server-1", "pod-one")
	r.container(t, "ctr2", "server-2", "pod-two")
	r.process(10, 900, "ctr1", "", vdev.EnvMemoryLimit+"=x")
	r.process(11, 900, "ctr1", "")
	r.process(12, 900, "ctr1", "", vdev.EnvMemoryLimit+"=0=1024M")
	r.process(13, 900, "ctr2", "", vdev.EnvMemoryLimit+"=x")
	caps := map[string]uint64{gpuA + "::0": 20 * gib, gpuB + "::0": 40 * gib, PodName(gpuA, "server-1"): 20 * gib}
	// The single layout's daemon holds a client that sees one GPU to its
	// ordinal 0's limit, the largest cap: above pod one's; a pod's client
	// sees every GPU, each at its own limit.
	r.acct.SetServerMemoryLimits(map[gpu.UUID]units.MiB{gpuA: 40960, gpuB: 40960})
	var ncs []NewClient
	for _, pid := range []int{10, 11, 12, 13} {
		ncs = append(ncs, NewClient{PID: pid, GPUs: []gpu.UUID{gpuB, gpuA}, At: r.clock.now()})
	}
	conn := r.acct.Connected(context.Background(), config.AccountingEnforce, ncs, caps, nil, map[gpu.UUID]Terminator{gpuA: r.term})
	if len(conn.Steps) != 0 {
		t.Fatalf("steps %v before the contexts are up", stepNames(conn.Steps))
	}
	if len(conn.Usage.Escapes) != 1 || conn.Usage.Escapes[0].Server != "server-1" {
		t.Errorf("escapes %+v", conn.Usage.Escapes)
	}
	act := r.acct.Activated(context.Background(), config.AccountingEnforce, []int{10, 11, 12, 13})
	if got := stepNames(act.Steps); !slices.Equal(got, []string{"10:sigkill"}) {
		t.Fatalf("steps %v, want 10 killed once its context is up", got)
	}
	if s := act.Steps[0]; s.Server != "server-1" || s.Cause != CauseLimit || s.Detected != DetectedConnect || s.GPU != gpuA {
		t.Errorf("step %+v", s)
	}
}
