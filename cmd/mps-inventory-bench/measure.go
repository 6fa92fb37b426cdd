package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"
)

// result is what one measurement saw: how many operations completed in how
// long, their latencies, and the failures.
type result struct {
	name      string
	ops       int
	elapsed   time.Duration
	latencies []time.Duration // sorted
	errors    int
	firstErr  error
	// cpu is the CPU time (user + system) this process spent over
	// elapsed: with the server in the process, what an operation costs on
	// a machine others share too (the rate depends on what they leave).
	cpu time.Duration
}

// cpuPerOp is the process's CPU time per completed operation.
func (r result) cpuPerOp() time.Duration {
	if r.ops == 0 {
		return 0
	}
	return r.cpu / time.Duration(r.ops)
}

// processCPU is the CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (r result) perSecond() float64 { return float64(r.ops) / r.elapsed.Seconds() }

// percentile is the latency below which p (0..1) of the operations were.
func (r result) percentile(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	i := min(len(r.latencies)-1, int(p*float64(len(r.latencies))))
	return r.latencies[i]
}

// op is one operation: worker w's i-th.
type op func(ctx context.Context, w, i int) error

// measure runs op on workers goroutines for d (after warm, whose
// operations are not counted), and collects every operation's latency.
func measure(ctx context.Context, name string, workers int, warm, d time.Duration, run op) result {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	res := result{name: name}
	warmUntil := time.Now().Add(warm)
	stopAt := warmUntil.Add(d)
	var wg sync.WaitGroup
	var cpuAtWarm time.Duration
	go func() {
		t := time.NewTimer(time.Until(warmUntil))
		defer t.Stop()
		select {
		case <-t.C:
			mu.Lock()
			cpuAtWarm = processCPU()
			mu.Unlock()
		case <-ctx.Done():
		}
	}()
	for w := range workers {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				t0 := time.Now()
				if t0.After(stopAt) {
					return
				}
				err := run(ctx, w, i)
				lat := time.Since(t0)
				if t0.Before(warmUntil) {
					continue
				}
				mu.Lock()
				if err != nil {
					res.errors++
					if res.firstErr == nil {
						res.firstErr = err
					}
				} else {
					res.ops++
					res.latencies = append(res.latencies, lat)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// The operations started in [warmUntil, stopAt], the last ones ending
	// a little after it.
	res.elapsed = time.Since(warmUntil)
	mu.Lock()
	if cpuAtWarm > 0 {
		res.cpu = processCPU() - cpuAtWarm
	}
	mu.Unlock()
	slices.Sort(res.latencies)
	return res
}

// ms formats a duration in milliseconds with 2 decimals.
func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d.Microseconds())/1000) }
