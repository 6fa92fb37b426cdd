package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"yunion.io/x/mps-daemon/pkg/inventory/client"
)

// The host-sync load (--sync, issue 41): every host's daemon syncs its
// rows every --interval with the daemon's own client.SyncDevices, open
// loop (each sync starts at its time, whether the ones before it ended or
// not), the hosts' times spread evenly over the interval; each interval a
// share of the hosts (--change) changes one of its rows first. A sync's
// latency runs from the time it was due, so waiting in this process
// counts too. The hosts go to the inventories of --url in turn (host i to
// the i % K-th), as a load balancer would spread them.

// maxInFlight bounds the syncs under way: past it a sync is not started
// and counts as an error (the inventories are far behind).
const maxInFlight = 50000

type syncLoad struct {
	hosts    []*syncHost
	clients  []*client.Client
	interval time.Duration
	change   float64
	warm     time.Duration
	duration time.Duration
	logf     func(string, ...any)
}

// syncResult is what the load measured.
type syncResult struct {
	target, achieved float64 // syncs/s
	syncs, errors    int
	overruns, writes int
	firstErr         error
	latencies        []time.Duration // sorted
	// lag is how late this loader started a sync at worst; unsent the
	// syncs it had no time left to start.
	lag               time.Duration
	unsent            int
	elapsed           time.Duration
	cpu               cpuUse
	loadBefore, after string
}

// newSyncClients makes each host's daemon client: its own token, the
// inventory of its turn, no retries (an error is an error), one
// connection pool for all (a daemon keeps one connection to its
// inventory; the pool keeps as many as syncs run at once).
func newSyncClients(hosts []*syncHost, urls []string) ([]*client.Client, *http.Transport) {
	tr := &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: 2 * time.Minute}
	hc := &http.Client{Transport: tr}
	out := make([]*client.Client, len(hosts))
	for i, h := range hosts {
		out[i] = client.New(client.Options{URL: urls[i%len(urls)], Token: h.token, Retries: -1, HTTPClient: hc})
	}
	return out, tr
}

// settle syncs every host once, workers at a time: what each daemon does
// when it starts; afterwards every client knows its host's rows.
func (l *syncLoad) settle(ctx context.Context, workers int) (writes int, err error) {
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(l.hosts) {
					return
				}
				res, err := l.clients[i].SyncDevices(ctx, l.hosts[i].id, slices.Clone(l.hosts[i].desired))
				mu.Lock()
				writes += res.Created + res.Updated + res.Deleted
				if err != nil && first == nil {
					first = fmt.Errorf("first sync of %s: %w", l.hosts[i].name, err)
				}
				mu.Unlock()
				if (i+1)%20000 == 0 {
					l.logf("first syncs: %d/%d, %.0f/s", i+1, len(l.hosts), float64(i+1)/time.Since(start).Seconds())
				}
			}
		})
	}
	wg.Wait()
	return writes, first
}

// run is the open loop: warm, then duration measured.
func (l *syncLoad) run(ctx context.Context, cpu *cpuMeter) syncResult {
	n := len(l.hosts)
	res := syncResult{target: float64(n) / l.interval.Seconds(), loadBefore: loadAverage()}
	start := time.Now().Add(10 * time.Millisecond)
	measureFrom := start.Add(l.warm)
	end := measureFrom.Add(l.duration)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var inFlight atomic.Int64
	var cpuAt0 cpuUse
	cpuTaken := false
	record := func(due time.Time, lat time.Duration, writes int, err error) {
		if due.Before(measureFrom) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		res.writes += writes
		if err != nil {
			res.errors++
			if res.firstErr == nil {
				res.firstErr = err
			}
			return
		}
		res.syncs++
		res.latencies = append(res.latencies, lat)
	}
	r := rand.New(rand.NewPCG(uint64(start.UnixNano()), 41))
	for k := 0; ctx.Err() == nil; k++ {
		i, round := k%n, k/n
		due := start.Add(time.Duration(round)*l.interval + time.Duration(int64(l.interval)*int64(i)/int64(n)))
		if !due.Before(end) {
			break
		}
		wait := time.Until(due)
		if wait > time.Millisecond {
			time.Sleep(wait)
		}
		if late := -wait; late > res.lag {
			res.lag = late
		}
		if !time.Now().Before(end) {
			// This loader cannot start the syncs as fast as they are due
			// (a machine too busy): the ones left are not sent, counted as
			// errors, and the run is not a measurement of the inventory.
			res.unsent = int((end.Sub(due)) * time.Duration(n) / l.interval)
			res.errors += res.unsent
			break
		}
		if !cpuTaken && !due.Before(measureFrom) {
			cpuAt0, cpuTaken = cpu.read(), true
		}
		h := l.hosts[i]
		if h.busy.Load() || inFlight.Load() >= maxInFlight {
			// The host's daemon is still in its last sync: it would sync
			// late. Counted as an error.
			if !due.Before(measureFrom) {
				mu.Lock()
				res.overruns++
				res.errors++
				mu.Unlock()
			}
			continue
		}
		if round > 0 && r.Float64() < l.change {
			changeRow(h.desired, round)
		}
		// The host's last sync has ended (busy), so the rows are not read
		// while they change: its sync gets them as they are.
		desired := h.desired
		h.busy.Store(true)
		inFlight.Add(1)
		c := l.clients[i]
		wg.Go(func() {
			defer inFlight.Add(-1)
			defer h.busy.Store(false)
			sres, err := c.SyncDevices(ctx, h.id, desired)
			if err != nil {
				err = fmt.Errorf("%s: %w", h.name, err)
			}
			record(due, time.Since(due), sres.Created+sres.Updated+sres.Deleted, err)
		})
	}
	wg.Wait()
	res.elapsed = time.Since(measureFrom)
	if cpuTaken {
		res.cpu = cpu.read().sub(cpuAt0)
	}
	res.after = loadAverage()
	res.achieved = float64(res.syncs) / l.duration.Seconds()
	slices.Sort(res.latencies)
	return res
}

func (r syncResult) percentile(p float64) time.Duration {
	return result{latencies: r.latencies}.percentile(p)
}

// report prints the load's line.
func (r syncResult) report(w io.Writer, l *syncLoad, rowsPerHost, inventories int, dialect string) {
	fmt.Fprintf(w, "## Host sync, %s, %d inventor%s: %d hosts x %d rows, every %s, %.1f%% changing a row each interval\n\n",
		dialect, inventories, map[bool]string{true: "y", false: "ies"}[inventories == 1], len(l.hosts), rowsPerHost, l.interval, 100*l.change)
	fmt.Fprintf(w, "%s; measured %s after %s of warm-up; load average %s before, %s after.\n\n", machine(), l.duration, l.warm, r.loadBefore, r.after)
	fmt.Fprintln(w, "| target syncs/s | achieved syncs/s | p50 ms | p99 ms | max ms | errors | rows written | CPU s: database | inventories | this loader |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	max := time.Duration(0)
	if len(r.latencies) > 0 {
		max = r.latencies[len(r.latencies)-1]
	}
	fmt.Fprintf(w, "| %.0f | %.0f | %s | %s | %s | %d | %d | %s | %s | %.1f |\n\n", r.target, r.achieved,
		ms(r.percentile(0.5)), ms(r.percentile(0.99)), ms(max), r.errors, r.writes,
		r.cpu.dbString(), r.cpu.inventoriesString(), r.cpu.self.Seconds())
	fmt.Fprintf(w, "This loader started its syncs at most %s late.", r.lag.Round(time.Millisecond))
	if r.unsent > 0 {
		fmt.Fprintf(w, " It could not start %d syncs before the end (too busy itself): not a measurement of the inventory.", r.unsent)
	}
	fmt.Fprint(w, "\n\n")
	if r.errors > 0 {
		fmt.Fprintf(w, "Errors: %d (%d syncs not started: their host's last one still ran; %d not sent), the first: %v\n\n", r.errors, r.overruns, r.unsent, r.firstErr)
	}
}

// splitURLs reads --url's comma-separated list.
func splitURLs(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}
