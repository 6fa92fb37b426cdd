// Command mps-inventory serves the REST inventory (Cloudpods' `hosts` and
// `isolated_devices` resources, with a keystone v3 face so Cloudpods' own
// climc works against it) from a SQLite file or a PostgreSQL database
// (which several processes may serve at once), for sites without a Cloudpods
// region, and manages its API tokens (`mps-inventory token`).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"yunion.io/x/mps-daemon/pkg/inventory/server"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
	"yunion.io/x/mps-daemon/pkg/logging"
	"yunion.io/x/mps-daemon/pkg/version"
	"yunion.io/x/mps-daemon/pkg/webtls"
)

type flags struct {
	listen         string
	db             string
	adminTokenFile string
	logLevel       string
	addressFile    string
	region         string
	publicURL      string
	keystoneTTL    time.Duration
	webConfigFile  string
	hostCerts      bool
}

// shutdownTimeout is how long requests in flight get to finish on SIGTERM.
const shutdownTimeout = 10 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole command with its streams, so that tests run it
// in-process.
func run(args []string, stdout, stderr io.Writer) int {
	var f flags
	serveCmd := func(cmd *cobra.Command, _ []string) error { return serve(cmd.Context(), f, stderr) }
	root := &cobra.Command{
		Use:           "mps-inventory",
		Short:         "Serve the isolated-device inventory (Cloudpods' hosts and isolated_devices API) from SQLite or PostgreSQL",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Version,
		Args:          cobra.NoArgs,
		RunE:          serveCmd,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&f.db, "db", "/var/lib/yunion-mps/inventory.db",
		"database: a SQLite file path (created when missing; also sqlite://PATH or file:PATH), or a PostgreSQL DSN "+
			"(postgres://user:pass@host/db or \"host=... dbname=...\"), which several mps-inventory processes may share")
	pf.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	serveC := &cobra.Command{
		Use:   "serve",
		Short: "Serve the API (the default command)",
		Args:  cobra.NoArgs,
		RunE:  serveCmd,
	}
	for _, c := range []*cobra.Command{root, serveC} {
		fl := c.Flags()
		fl.StringVar(&f.listen, "listen", "127.0.0.1:9330", "address to serve the API on")
		fl.StringVar(&f.addressFile, "address-file", "", "write the address actually bound (useful with port 0) to this file")
		fl.StringVar(&f.adminTokenFile, "admin-token-file", "/var/lib/yunion-mps/admin.token",
			"keep a valid admin token in this file (mode 0600), created at start when missing; empty: none")
		fl.StringVar(&f.region, "region", server.DefaultRegion,
			"keystone region of the service catalog Cloudpods' clients read (their OS_REGION_NAME)")
		fl.StringVar(&f.publicURL, "public-url", "",
			"the inventory's URL in the service catalog (default: the address each client used)")
		fl.DurationVar(&f.keystoneTTL, "keystone-token-ttl", server.DefaultKeystoneTokenTTL,
			"how long a token from POST /v3/auth/tokens is good for")
		fl.StringVar(&f.webConfigFile, "web.config.file", "",
			"web configuration file (TLS, client certificates, basic auth) in the Prometheus exporters' format; empty: plain HTTP")
		fl.BoolVar(&f.hostCerts, "host-certificates", false,
			"a request without a token whose client certificate verified against the web configuration's client_ca_file acts as a host token of the host its common name names")
	}
	root.AddCommand(serveC, tokenCommand(&f, stdout, stderr))
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "mps-inventory:", err)
		return 1
	}
	return 0
}

func serve(ctx context.Context, f flags, stderr io.Writer) error {
	if err := checkServeFlags(f); err != nil {
		return err
	}
	st, log, err := openStore(ctx, f, stderr)
	if err != nil {
		return err
	}
	defer func() {
		if err := st.Close(); err != nil {
			log.Error("closing the database", "error", err)
		}
	}()
	if err := server.EnsureAdminTokenFile(ctx, st, f.adminTokenFile, log.With("component", "auth")); err != nil {
		return err
	}

	ln, wc, err := listen(f, log)
	if err != nil {
		return err
	}
	api := server.New(st, server.Options{Region: f.region, PublicURL: f.publicURL, KeystoneTokenTTL: f.keystoneTTL, HostCertificates: f.hostCerts},
		log.With("component", "api"))
	summaries, stopSummaries := context.WithCancel(context.WithoutCancel(ctx))
	summariesDone := make(chan struct{})
	go func() { defer close(summariesDone); api.Run(summaries) }()
	defer func() { stopSummaries(); <-summariesDone }() // the last summaries after the last request
	srv := &http.Server{
		Handler:           api,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- webtls.Serve(ln, srv, wc, log) }()
	// The line comes before the address file: whoever waits for the file
	// to know the inventory is up finds the line already written.
	log.Info("serving", append([]any{"address", ln.Addr().String(), "db", store.RedactDSN(f.db), "backend", st.Dialect(), "host_certificates", f.hostCerts}, wc.Attrs()...)...)
	if f.addressFile != "" {
		if err := writeAddress(f.addressFile, ln.Addr().String()); err != nil {
			_ = srv.Close()
			return err
		}
	}
	stopSystemd := superviseWithSystemd(ctx, st, f.adminTokenFile, ln.Addr(), wc, log)
	defer stopSystemd()

	select {
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving: %w", err)
	}
	return nil
}

// openStore builds the --log-level logger and opens the --db database with
// it, for serve and the token commands alike.
func openStore(ctx context.Context, f flags, stderr io.Writer) (*store.Store, *slog.Logger, error) {
	log, err := logging.FromEnv(stderr, f.logLevel, os.Getenv)
	if err != nil {
		return nil, nil, err
	}
	st, err := store.Open(ctx, f.db, log.With("component", "store"))
	if err != nil {
		return nil, nil, err
	}
	return st, log, nil
}
