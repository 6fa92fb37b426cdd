package accounting

import (
	"strings"
	"testing"
)

// BenchmarkMapperLookup is what one MPS client costs each accounting tick
// (mps_health_interval): a container process found by its identity file, a
// host process by its environment, one chroot()ed 192 directories down
// (the climb jumps to the top, here the benchmark's own root without a
// file, so it ends billed through its parent), and one hidden from its own
// view, billed through its parent.
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
	m := p.mapper()
	for _, bc := range []struct {
		name   string
		pid    int
		source string
	}{{"container", 10, SourceIdentity}, {"host", 20, SourceEnviron}, {"deep-chroot", 30, SourceAncestor}, {"hidden", 40, SourceAncestor}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				id, err := m.Lookup(bc.pid, gpuA)
				if err != nil || id.Source != bc.source {
					b.Fatalf("Lookup(%d) = %+v, %v", bc.pid, id, err)
				}
			}
		})
	}
}
