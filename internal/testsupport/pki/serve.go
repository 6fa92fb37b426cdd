package pki

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/webtls"
)

// Serve serves h on loopback as wc says until the test ends and returns
// the listener's address.
func Serve(t testing.TB, wc webtls.WebConfig, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- webtls.Serve(ln, srv, wc, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	waitServing(t, ln.Addr().String(), wc.TLS)
	return ln.Addr().String()
}

// waitServing waits until the server on addr answers a connection: Serve
// reads the web configuration's files when it starts, so a test must not
// change them before (the listener accepts into its queue meanwhile, and
// a handshake waits).
func waitServing(t testing.TB, addr string, useTLS bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(200 * time.Millisecond))
		if useTLS {
			err = tls.Client(conn, &tls.Config{InsecureSkipVerify: true}).Handshake() //nolint:gosec // only whether it answers
		} else {
			_, err = io.WriteString(conn, "GET / HTTP/1.0\r\n\r\n")
			if err == nil {
				_, err = conn.Read(make([]byte, 1))
			}
		}
		conn.Close()
		var ne net.Error
		if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
			return // an answer, or a refusal: it serves
		}
	}
	t.Fatalf("nothing serves at %s", addr)
}
