package agent

import (
	"runtime/debug"
	"time"
)

// trimEvery is how often at most the loop hands the heap's free memory
// back to the OS (heapTrim).
const trimEvery = time.Minute

// heapTrim gives the garbage of the daemon's work back to the OS. Go's
// scavenger returns free heap only down to about the next collection's goal
// (the live heap and GOGC percent of it more, at least 4 MiB scaled by
// GOGC/100, plus a tenth), so between collections an idle daemon keeps the
// last reconciles', probes', scrapes' and accounting passes' garbage
// resident: 1-2 MiB beside about 3 MiB of heap in use (docs/benchmarks.md,
// "The daemon's own memory"). The loop trims once
// ready and then after its steps at most once every trimEvery: a forced
// collection and a scavenge (debug.FreeOSMemory), 2.6 ms of CPU on such a
// heap (BenchmarkHeapTrim), 0.004% of a core at once a minute. Only the
// Run loop (or a test calling Reconcile) touches it.
type heapTrim struct {
	every time.Duration
	last  time.Time
	// free returns the free heap to the OS (debug.FreeOSMemory; tests
	// count calls).
	free func()
}

func newHeapTrim() heapTrim { return heapTrim{every: trimEvery, free: debug.FreeOSMemory} }

// due says whether a trim at now is due: none yet, or every since the last.
func (t *heapTrim) due(now time.Time) bool {
	return t.last.IsZero() || now.Sub(t.last) >= t.every
}

// after trims if due at now, after a step of the loop.
func (t *heapTrim) after(now time.Time) {
	if t.due(now) {
		t.trim(now)
	}
}

// trim trims now, due or not (once ready: the start's garbage).
func (t *heapTrim) trim(now time.Time) {
	t.last = now
	t.free()
}
