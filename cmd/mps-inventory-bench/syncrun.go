package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"yunion.io/x/mps-daemon/pkg/inventory/client"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// syncConfig is the host-sync load's (--sync).
type syncConfig struct {
	on                 bool
	hosts, rowsPerHost int
	interval           time.Duration
	change             float64
	tokensFile         string
	inventoryPIDs      string
	dbPID              int
	settleWorkers      int
	list               bool
	// sharedToken: every host's daemon uses one admin token, instead of
	// its host's (what the per-host tokens cost).
	sharedToken bool
}

func syncFlags(fs *flag.FlagSet, s *syncConfig) {
	fs.BoolVar(&s.on, "sync", false, "the host-sync load instead of the measurements above: every host syncs every --interval")
	fs.IntVar(&s.hosts, "hosts", 10000, "--sync: hosts")
	fs.IntVar(&s.rowsPerHost, "rows-per-host", 8, "--sync: virtual devices of each host")
	fs.DurationVar(&s.interval, "interval", 30*time.Second, "--sync: each host's sync interval (mps_sync_interval)")
	fs.Float64Var(&s.change, "change", 0.01, "--sync: share of the hosts that change a row each interval")
	fs.StringVar(&s.tokensFile, "tokens-file", "", "--sync: the hosts' tokens, written by the fill and read by later runs (default: --db's path + .tokens for SQLite)")
	fs.StringVar(&s.inventoryPIDs, "inventory-pids", "", "--sync: comma-separated pids of the mps-inventory processes of --url, for their CPU time")
	fs.IntVar(&s.dbPID, "db-pid", 0, "--sync: PostgreSQL's postmaster pid (its postmaster.pid's first line), for the database's CPU time")
	fs.IntVar(&s.settleWorkers, "settle-workers", 64, "--sync: concurrent first syncs (each daemon's start) before the load")
	fs.BoolVar(&s.list, "list", false, "--sync: afterwards, one host's list (climc --host) and a walk of the whole list by marker")
	fs.BoolVar(&s.sharedToken, "shared-token", false, "--sync: every host syncs with one admin token instead of its own host token")
}

// runSync is the host-sync load on st's database, through the inventories
// of --url (comma-separated), or one served in this process.
func runSync(ctx context.Context, c config, st *store.Store, stdout io.Writer, logf func(string, ...any)) error {
	s := c.sync
	if s.hosts < 1 || s.rowsPerHost < 1 || s.interval <= 0 || s.change < 0 || s.change > 1 || s.settleWorkers < 1 {
		return errors.New("--hosts, --rows-per-host, --interval and --settle-workers must be positive, --change within 0..1")
	}
	if s.tokensFile == "" {
		kind, path, _ := store.ParseDSN(c.db)
		if kind != "sqlite" {
			return errors.New("--sync on PostgreSQL needs --tokens-file")
		}
		s.tokensFile = path + ".tokens"
	}
	pids, err := parsePIDs(s.inventoryPIDs)
	if err != nil {
		return fmt.Errorf("--inventory-pids: %w", err)
	}
	hosts, err := syncCluster(ctx, st, s.hosts, s.rowsPerHost, c.workers, s.tokensFile, logf)
	if err != nil {
		return err
	}
	if err := st.Analyze(ctx); err != nil {
		return err
	}
	if c.onlyFill {
		return nil
	}
	if s.sharedToken {
		tok, _, err := st.CreateToken(ctx, store.NewToken{Name: "mps-inventory-bench shared", Role: store.RoleAdmin})
		if err != nil {
			return err
		}
		for _, h := range hosts {
			h.token = tok
		}
	}
	urls := splitURLs(c.url)
	if len(urls) == 0 {
		url, _, stopServer, err := serve(ctx, st)
		if err != nil {
			return err
		}
		defer stopServer()
		urls = []string{url}
	}
	clients, tr := newSyncClients(hosts, urls)
	defer tr.CloseIdleConnections()
	l := &syncLoad{hosts: hosts, clients: clients, interval: s.interval, change: s.change, warm: c.warm, duration: c.duration, logf: logf}
	logf("first sync of each of %d hosts (%d at once)", len(hosts), s.settleWorkers)
	start := time.Now()
	writes, err := l.settle(ctx, s.settleWorkers)
	if err != nil {
		return err
	}
	logf("first syncs done in %s, %d rows written", time.Since(start).Round(time.Millisecond), writes)
	logf("host syncs: %d hosts every %s (%.0f/s), %s warm-up, %s measured", len(hosts), s.interval,
		float64(len(hosts))/s.interval.Seconds(), c.warm, c.duration)
	stopProfile, err := startCPUProfile(c.cpuProfile)
	if err != nil {
		return err
	}
	res := l.run(ctx, &cpuMeter{inventories: pids, db: s.dbPID})
	if err := stopProfile(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	res.report(stdout, l, s.rowsPerHost, len(urls), st.Dialect())
	if s.list {
		return syncLists(ctx, c, hosts, urls[0], stdout, logf)
	}
	return nil
}

// syncLists measures, on the filled cluster, one host's list as climc and
// mpsctl ask it (--host, a page of 20 with details) with --workers
// clients, and the time a walk of the whole list takes by marker (pages
// of 2048, what client.ListAllIsolatedDevices does).
func syncLists(ctx context.Context, c config, hosts []*syncHost, url string, w io.Writer, logf func(string, ...any)) error {
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * c.workers}
	defer tr.CloseIdleConnections()
	cl := client.New(client.Options{URL: url, Token: hosts[0].token, Retries: -1, HTTPClient: &http.Client{Transport: tr}})
	const name = "list: one host's devices (--host, 20 with details)"
	logf("measuring %s: %d workers, %s", name, c.workers, c.duration)
	r := measure(ctx, name, c.workers, c.warm, c.duration, func(ctx context.Context, _, _ int) error {
		h := hosts[rand.IntN(len(hosts))]
		l, err := cl.ListIsolatedDevices(ctx, client.ListOptions{HostID: h.name, Limit: 20, Details: true})
		if err == nil && len(l.IsolatedDevices) == 0 {
			err = fmt.Errorf("host %s: no devices", h.name)
		}
		return err
	})
	logf("walking the whole list by marker")
	start := time.Now()
	all, err := cl.ListAllIsolatedDevices(ctx, client.ListOptions{Limit: 2048})
	if err != nil {
		return fmt.Errorf("walking the list: %w", err)
	}
	walk := time.Since(start)
	fmt.Fprintln(w, "| measurement | ops | ops/s | p50 ms | p99 ms | max ms | errors |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	max := time.Duration(0)
	if len(r.latencies) > 0 {
		max = r.latencies[len(r.latencies)-1]
	}
	fmt.Fprintf(w, "| %s | %d | %.0f | %s | %s | %s | %d |\n", r.name, r.ops, r.perSecond(), ms(r.percentile(0.5)), ms(r.percentile(0.99)), ms(max), r.errors)
	fmt.Fprintf(w, "\nThe whole list by marker (pages of 2048): %d rows in %.1f s.\n\n", len(all), walk.Seconds())
	return nil
}
