package accounting

import (
	"errors"
	"strings"
	"testing"
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
