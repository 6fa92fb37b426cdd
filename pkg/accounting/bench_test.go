package accounting

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/pod"
)

// BenchmarkMapperLookup is what one MPS client costs each accounting tick
// (mps_health_interval): a container process found by its identity file, a
// host process by its environment, one chroot()ed 192 directories down
// (the climb jumps to the top, here the benchmark's own root without a
// file, so it ends billed through its parent), one hidden from its own
// view, billed through its parent, and two hidden with no ancestor that
// sees the file (issue 23), each the first of its cgroup in the sample, so
// the other processes of the host (500 here) are scanned: one billed by
// its cgroup, one whose cgroup shows no device.
//
//	go test -run '^$' -bench MapperLookup ./pkg/accounting
func BenchmarkMapperLookup(b *testing.B) {
	p := newFakeProc(b)
	a0 := gpuA + "::0"
	p.give("c", a0)
	p.addContainer(10, 1, 100, "c", a0)
	p.add(20, 200, a0)
	p.addChrooted(30, 10, 300, "c", a0, strings.Repeat("d/", 192))
	p.addHidden(40, 10, 400, "c", a0)
	p.addHidden(50, 1, 500, "c", a0)    // exec'd by the runtime, hid: billed by its cgroup
	p.addHidden(60, 1, 600, "lone", a0) // its whole container hid: no device
	for i := range 500 {                // the rest of a host's processes, scanned for peers
		p.add(1000+i, uint64(1000+i), "")
	}
	m := p.mapper()
	for _, bc := range []struct {
		name   string
		pid    int
		source string
	}{{"container", 10, SourceIdentity}, {"host", 20, SourceEnviron}, {"deep-chroot", 30, SourceAncestor}, {"hidden", 40, SourceAncestor},
		{"hidden-cgroup-scan", 50, SourceCgroup}, {"hidden-no-device-scan", 60, ""}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				clear(m.peers) // every lookup as the first of its cgroup in a sample: a scan of /proc
				id, err := m.Lookup(bc.pid, gpuA)
				if bc.source == "" && errors.Is(err, ErrNoIdentity) {
					continue
				}
				if err != nil || id.Source != bc.source {
					b.Fatalf("Lookup(%d) = %+v, %v", bc.pid, id, err)
				}
			}
		})
	}
}

// BenchmarkPass is one pass over a GPU of 48 clients (MPS's most on Volta
// and later), each a container's process found by its identity file: a
// tick, which looks every client up, and a poll, which knows them from the
// pass before (Accountant.lookupFor).
//
//	go test -run '^$' -bench Pass ./pkg/accounting
func BenchmarkPass(b *testing.B) {
	p := newFakeProc(b)
	caps := map[string]uint64{}
	var procs []gpu.Process
	for i := range 48 {
		dev := fmt.Sprintf("%s::%d", gpuA, i%4)
		caps[dev] = 20 << 30
		ctr := fmt.Sprintf("c%d", i%4)
		if i < 4 {
			p.give(ctr, dev)
		}
		p.addContainer(100+i, 1, uint64(100+i), ctr, dev)
		procs = append(procs, gpu.Process{PID: 100 + i, UsedMemoryBytes: 1 << 30})
	}
	sample := map[gpu.UUID][]gpu.Process{gpuA: procs}
	for _, kind := range []string{"tick", "poll"} {
		b.Run(kind, func(b *testing.B) {
			a := New(Options{ProcRoot: p.root, Identities: p.store.Table})
			a.Tick(context.Background(), config.AccountingReport, sample, caps, nil, nil)
			for b.Loop() {
				var r Report
				if kind == "tick" {
					r = a.Tick(context.Background(), config.AccountingReport, sample, caps, nil, nil)
				} else {
					r = a.Poll(context.Background(), config.AccountingReport, sample, caps, nil, nil)
				}
				if len(r.Usage.Unknown) != 0 {
					b.Fatalf("unknown %+v", r.Usage.Unknown)
				}
			}
		})
	}
}

// BenchmarkMapperLookupPod is what a client in a Cloudpods pod costs a
// tick: its cgroup read, its container's server from the Finder's cache
// ("cached"), or from containerd's bundle, a config.json of 20 KB, read and
// parsed ("bundle": the first lookup of a container); and what the pod
// finder adds to a CDI container's lookup (its cgroup, not a pod's).
//
//	go test -run '^$' -bench MapperLookupPod ./pkg/accounting
func BenchmarkMapperLookupPod(b *testing.B) {
	r := newPodRig(b)
	r.container(b, "c1", "server-1", "pod-one")
	// A bundle as large as a real one: its environment and mounts.
	path := r.state + "/io.containerd.runtime.v2.task/k8s.io/c1/config.json"
	spec, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	pad := `,"process":{"env":["` + strings.Repeat("X", 20<<10) + `"]}}`
	if err := os.WriteFile(path, append(spec[:len(spec)-1], pad...), 0o644); err != nil {
		b.Fatal(err)
	}
	r.process(10, 100, "c1", "")
	a0 := gpuA + "::0"
	r.proc.give("cdi", a0)
	r.proc.addContainer(20, 1, 200, "cdi", a0)
	caps := map[string]uint64{a0: 20 * gib, PodName(gpuA, "server-1"): 20 * gib}
	r.acct.mapper.Refresh()
	for _, bc := range []struct {
		name  string
		pid   int
		fresh bool
		want  string
	}{{"pod-cached", 10, false, PodName(gpuA, "server-1")}, {"pod-bundle", 10, true, PodName(gpuA, "server-1")}, {"cdi-container", 20, false, a0}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if bc.fresh {
					r.acct.mapper.Pods = pod.NewFinder(pod.Options{CgroupParent: pod.DefaultCgroupParent, StateDir: r.state})
				}
				id, err := r.acct.lookup(bc.pid, gpuA, caps)
				if err != nil || id.Device != bc.want {
					b.Fatalf("lookup(%d) = %+v, %v", bc.pid, id, err)
				}
			}
		})
	}
}
