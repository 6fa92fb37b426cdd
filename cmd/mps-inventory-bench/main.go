// Command mps-inventory-bench fills an inventory database with a realistic
// cluster (hosts of 8 GPUs split in 4 to 48 MPS slices, a fraction attached
// to pods) and measures the inventory over HTTP with concurrent clients:
// attaches and detaches per second, and the latency of list pages. It is a
// tool, not a test: rerun it to reproduce docs/benchmarks.md.
//
//	mps-inventory-bench --db /tmp/inv.db --rows 100000
//	mps-inventory-bench --db 'postgres://user@/bench?host=/tmp/pg' --rows 1000000
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
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"yunion.io/x/mps-daemon/pkg/inventory/client"
	"yunion.io/x/mps-daemon/pkg/inventory/server"
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
	fs.StringVar(&c.url, "url", "", "measure this running mps-inventory (serving --db) instead of one in this process")
	fs.StringVar(&c.token, "token", "", "admin token for --url")
	fs.BoolVar(&c.explain, "explain", false, "print the database's plans of the list statements")
	fs.BoolVar(&c.onlyFill, "fill-only", false, "fill (or check) the database and stop")
	fs.StringVar(&c.only, "only", "", "make only the measurements whose name holds this text (\"attach\", \"list\", \"marker\")")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the measurements (go tool pprof) to this file")
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
	case (c.url == "") != (c.token == ""):
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

// startCPUProfile starts a CPU profile into path (none when path is
// empty); the function it returns stops it and closes the file.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("creating the CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("starting the CPU profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("writing the CPU profile: %w", err)
		}
		return nil
	}, nil
}

// serve starts the API over st on a loopback port, with a new admin token.
func serve(ctx context.Context, st *store.Store) (url, token string, stop func(), err error) {
	token, _, err = st.CreateToken(ctx, store.NewToken{Name: "mps-inventory-bench", Role: store.RoleAdmin})
	if err != nil {
		return "", "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", "", nil, err
	}
	srv := &http.Server{Handler: server.New(st, server.Options{}, slog.New(slog.DiscardHandler)), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
	return "http://" + ln.Addr().String(), token, stop, nil
}

// machine describes where the figures come from.
func machine() string {
	return fmt.Sprintf("%s/%s, GOMAXPROCS %d, %s", runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.Version())
}
