// Command mps-inventory serves the REST inventory (Cloudpods' `hosts` and
// `isolated_devices` resources) from a SQLite database, for sites without a
// Cloudpods region.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"yunion.io/x/mps-daemon/pkg/inventory/server"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
	"yunion.io/x/mps-daemon/pkg/logging"
	"yunion.io/x/mps-daemon/pkg/version"
)

type flags struct {
	listen      string
	db          string
	tokenFile   string
	logLevel    string
	addressFile string
}

// shutdownTimeout is how long requests in flight get to finish on SIGTERM.
const shutdownTimeout = 10 * time.Second

func main() {
	os.Exit(run())
}

func run() int {
	var f flags
	serveCmd := func(cmd *cobra.Command, _ []string) error { return serve(cmd.Context(), f) }
	root := &cobra.Command{
		Use:           "mps-inventory",
		Short:         "Serve the isolated-device inventory (Cloudpods' hosts and isolated_devices API) from SQLite",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Version,
		Args:          cobra.NoArgs,
		RunE:          serveCmd,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&f.listen, "listen", "127.0.0.1:9330", "address to serve the API on")
	pf.StringVar(&f.db, "db", "/var/lib/yunion-mps/inventory.db", "SQLite database file (created when missing)")
	pf.StringVar(&f.tokenFile, "token-file", "", "file of accepted bearer tokens, one per line (# comments); none: no authentication")
	pf.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	pf.StringVar(&f.addressFile, "address-file", "", "write the address actually bound (useful with port 0) to this file")
	root.AddCommand(&cobra.Command{
		Use:   "serve",
		Short: "Serve the API (the default command)",
		Args:  cobra.NoArgs,
		RunE:  serveCmd,
	})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "mps-inventory:", err)
		return 1
	}
	return 0
}

func serve(ctx context.Context, f flags) error {
	log, err := logging.FromEnv(os.Stderr, f.logLevel, os.Getenv)
	if err != nil {
		return err
	}
	var tokens []string
	if f.tokenFile != "" {
		if tokens, err = server.LoadTokens(f.tokenFile); err != nil {
			return err
		}
	}
	st, err := store.OpenSQLite(ctx, f.db, log.With("component", "store"))
	if err != nil {
		return err
	}
	defer func() {
		if err := st.Close(); err != nil {
			log.Error("closing the database", "error", err)
		}
	}()

	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", f.listen, err)
	}
	srv := &http.Server{
		Handler:           server.New(st, server.Options{Tokens: tokens}, log.With("component", "api")),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if f.addressFile != "" {
		if err := writeAddress(f.addressFile, ln.Addr().String()); err != nil {
			_ = srv.Close()
			return err
		}
	}
	log.Info("serving", "address", ln.Addr().String(), "db", f.db, "authentication", len(tokens) > 0)

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

// writeAddress writes the file whole (temporary file, then rename), so a
// test polling for it never reads half an address.
func writeAddress(path, addr string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".address-*")
	if err != nil {
		return fmt.Errorf("writing address file: %w", err)
	}
	_, werr := tmp.WriteString(addr)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing address file %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing address file %s: %w", path, err)
	}
	return nil
}
