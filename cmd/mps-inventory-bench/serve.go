package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"yunion.io/x/mps-daemon/pkg/inventory/server"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

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
