// Command mps-inventory-bench fills an inventory database with a realistic
// cluster (hosts of 8 GPUs split in 4 to 48 MPS slices, a fraction attached
// to pods) and measures the inventory over HTTP with concurrent clients:
// attaches and detaches per second, and the latency of list pages; or,
// with --sync, the hosts' own syncs (client.SyncDevices), open loop, every
// --interval, through one or several running inventories. It is a tool,
// not a test: rerun it to reproduce docs/benchmarks.md.
//
//	mps-inventory-bench --db /tmp/inv.db --rows 100000
//	mps-inventory-bench --db 'postgres://user@/bench?host=/tmp/pg' --rows 1000000
//	mps-inventory-bench --db /tmp/sync.db --sync --hosts 10000 --interval 30s --duration 5m
//
// The database must be empty (it is filled) or hold the rows of an earlier
// run with the same --rows and --seed (they are reused). The server runs in
// this process on loopback, unless --url and --token name a running
// mps-inventory serving the same database.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"yunion.io/x/mps-daemon/pkg/inventory/client"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

type config struct {
	db, url, token    string
	rows              int
	seed              uint64
	attached          float64
	workers           int
	warm, duration    time.Duration
	explain, onlyFill bool
	// only keeps the measurements whose name holds it; cpuProfile is a
	// file for a CPU profile of the measurements.
	only, cpuProfile string
	sync             syncConfig
}

func main() {
	var c config
	fs := flag.NewFlagSet("mps-inventory-bench", flag.ExitOnError)
	fs.StringVar(&c.db, "db", "", "the database: a SQLite file path or a PostgreSQL DSN (as mps-inventory --db); required")
	fs.IntVar(&c.rows, "rows", 1000, "device rows to fill")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the cluster's shape")
	fs.Float64Var(&c.attached, "attached", 0.3, "fraction of the slices attached to pods")
	fs.IntVar(&c.workers, "workers", 8, "concurrent clients (and fill workers)")
	fs.DurationVar(&c.warm, "warm", time.Second, "warm-up of each measurement, not counted")
	fs.DurationVar(&c.duration, "duration", 5*time.Second, "length of each measurement")
	fs.StringVar(&c.url, "url", "", "measure this running mps-inventory (serving --db) instead of one in this process (--sync: several, comma-separated)")
	fs.StringVar(&c.token, "token", "", "admin token for --url")
	fs.BoolVar(&c.explain, "explain", false, "print the database's plans of the list statements")
	fs.BoolVar(&c.onlyFill, "fill-only", false, "fill (or check) the database and stop")
	fs.StringVar(&c.only, "only", "", "make only the measurements whose name holds this text (\"attach\", \"list\", \"marker\")")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the measurements (go tool pprof) to this file")
	syncFlags(fs, &c.sync)
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "mps-inventory-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config, stdout, stderr io.Writer) error {
	switch {
	case c.db == "":
		return errors.New("--db is required")
	case c.rows < 1 || c.workers < 1 || c.duration <= 0:
		return errors.New("--rows, --workers and --duration must be positive")
	case !c.sync.on && (c.url == "") != (c.token == ""):
		return errors.New("--url and --token go together")
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	st, err := store.Open(ctx, c.db, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	if c.sync.on {
		return runSync(ctx, c, st, stdout, logf)
	}
	hosts := clusterShape(c.rows, c.seed)

	_, have, err := st.ListDevices(ctx, store.DeviceFilter{})
	if err != nil {
		return err
	}
	var fillTime time.Duration
	switch have {
	case 0:
		logf("filling %d rows on %d hosts (%s)", c.rows, len(hosts), st.Dialect())
		start := time.Now()
		if err := fill(ctx, st, hosts, c.attached, c.seed, c.workers, logf); err != nil {
			return err
		}
		fillTime = time.Since(start)
		logf("filled in %s", fillTime.Round(time.Millisecond))
	case c.rows:
		logf("reusing the %d rows in the database", have)
	default:
		return fmt.Errorf("the database holds %d devices, not %d: give an empty database, or --rows %d", have, c.rows, have)
	}
	start := time.Now()
	if err := st.Analyze(ctx); err != nil {
		return err
	}
	analyzeTime := time.Since(start)
	if c.onlyFill {
		return nil
	}

	b := &bench{c: c, st: st, hosts: hosts, logf: logf}
	if c.explain {
		if err := b.explain(ctx, stdout); err != nil {
			return err
		}
	}
	url, token := c.url, c.token
	if url == "" {
		var stopServer func()
		if url, token, stopServer, err = serve(ctx, st); err != nil {
			return err
		}
		defer stopServer()
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * c.workers}
	defer tr.CloseIdleConnections()
	b.client = client.New(client.Options{URL: url, Token: token, Retries: -1, HTTPClient: &http.Client{Transport: tr}})
	stopProfile, err := startCPUProfile(c.cpuProfile)
	if err != nil {
		return err
	}
	results, err := b.run(ctx)
	if perr := stopProfile(); err == nil {
		err = perr
	}
	if err != nil {
		return err
	}
	b.report(stdout, results, fillTime, analyzeTime)
	return nil
}
