package agent

import (
	"context"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestHeapTrimAtMostOnceEvery(t *testing.T) {
	n := 0
	tr := heapTrim{every: time.Minute, free: func() { n++ }}
	t0 := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		at   time.Duration
		want int
	}{
		{0, 1},                 // the first step trims
		{30 * time.Second, 1},  // within the minute: not again
		{59 * time.Second, 1},  //
		{time.Minute, 2},       // a minute on
		{time.Minute + 1, 2},   //
		{150 * time.Second, 3}, // 90 s on
	} {
		tr.after(t0.Add(c.at))
		if n != c.want {
			t.Fatalf("at +%s: %d trims, want %d", c.at, n, c.want)
		}
	}
	// Ready trims whatever the time, and the minute counts from there.
	tr.trim(t0.Add(160 * time.Second))
	tr.after(t0.Add(200 * time.Second))
	if n != 4 {
		t.Fatalf("%d trims after ready's and a step 40 s later, want 4", n)
	}
}

// The loop trims once ready and then after its steps (a health probe here)
// once trim.every has passed.
func TestLoopTrimsTheHeapAfterItsSteps(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	h.agent.cfg.Host.ListenAddress = ""
	h.agent.cfg.Host.HealthInterval = 10 * time.Millisecond
	var n atomic.Int32
	h.agent.trim = heapTrim{every: 50 * time.Millisecond, free: func() { n.Add(1) }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.agent.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "ready", func() bool { return h.agent.Status().Ready })
	if n.Load() < 1 {
		t.Fatal("ready without a trim")
	}
	at := n.Load()
	waitFor(t, "two more trims after health probes (the sync interval is 30 s)", func() bool { return n.Load() >= at+2 })
}

// heapFree is the heap's free memory not yet returned to the OS.
func heapFree() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

var sink [][]byte

// What the trim rests on: the default free gives a collection's free heap
// back to the OS, where the scavenger alone keeps it up to the heap goal.
func TestHeapTrimReturnsFreeHeap(t *testing.T) {
	// 16 MiB live, then dropped and collected: free, and resident.
	for range 256 {
		sink = append(sink, make([]byte, 64<<10))
	}
	for _, b := range sink {
		b[0] = 1
	}
	sink = nil
	runtime.GC()
	if f := heapFree(); f < 8<<20 {
		t.Skipf("only %d bytes free and resident after dropping 16 MiB: the scavenger already returned them", f)
	}
	tr := newHeapTrim()
	tr.trim(time.Now())
	if f := heapFree(); f > 4<<20 {
		t.Errorf("%d bytes of free heap still resident after the trim", f)
	}
}

type benchNode struct {
	next *benchNode
	name string
	buf  [48]byte
}

// BenchmarkHeapTrim: one trim (forced collection and scavenge) of a heap
// of about the idle daemon's: 3 MiB live in small objects with pointers,
// 1 MiB of garbage made since the last trim. cpu-ms/op is the process's
// CPU (all of the collector's workers), not only the caller's wall time.
func BenchmarkHeapTrim(b *testing.B) {
	var live *benchNode
	for range 3 << 20 / 96 {
		live = &benchNode{next: live, name: "x"}
	}
	tr := newHeapTrim()
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		for range 1 << 20 / 64 {
			sink = append(sink, make([]byte, 64))
		}
		sink = nil
		c0 := cpuTime(b)
		b.StartTimer()
		tr.trim(time.Now())
		b.StopTimer()
		cpu += cpuTime(b) - c0
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
	runtime.KeepAlive(live)
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
