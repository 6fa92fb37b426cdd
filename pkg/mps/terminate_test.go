package mps_test

import (
	"errors"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
)

func TestParseTerminateStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  string
		want error // nil: success; errUnexpected: any other error
	}{
		{"done (mps-probe2.txt)", "0\n", nil},
		{"unknown server (mps-probe.txt)", "Server 999999 not found\nServer 999999 not found!\n1\n", mps.ErrServerNotFound},
		{"unknown client (not measured)", "1\n", mps.ErrClientNotFound},
		{"nothing", "", errUnexpected},
		{"garbage", "maybe\n", errUnexpected},
		{"zero after text", "Server 5 not found\n0\n", errUnexpected},
		{"other status", "2\n", errUnexpected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := mps.ParseTerminateStatus(tc.out)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("ParseTerminateStatus(%q) = %v, want success", tc.out, err)
			case tc.want == errUnexpected:
				if err == nil || errors.Is(err, mps.ErrServerNotFound) || errors.Is(err, mps.ErrClientNotFound) {
					t.Fatalf("ParseTerminateStatus(%q) = %v, want an unexpected-answer error", tc.out, err)
				}
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("ParseTerminateStatus(%q) = %v, want %v", tc.out, err, tc.want)
			}
		})
	}
}

var errUnexpected = errors.New("unexpected")

func TestTerminateClientOnSimulatedControl(t *testing.T) {
	dir := t.TempDir()
	env := mps.Env{PipeDir: filepath.Join(dir, "p"), LogDir: filepath.Join(dir, "l"), VisibleDevices: "GPU-1"}
	sim := mpssim.New(nil)
	c := mps.NewController(sim, env, 5*time.Second, nil)
	if _, err := c.Ensure(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, err := c.ClientServers(t.Context())
	if err != nil || len(got) != 0 {
		t.Fatalf("ClientServers before any client = %v, %v; want an empty map", got, err)
	}
	srv, err := sim.AddClient(env.PipeDir, 981)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sim.AddClient(env.PipeDir, 982); err != nil {
		t.Fatal(err)
	}
	got, err = c.ClientServers(t.Context())
	if want := map[int]int{981: srv, 982: srv}; err != nil || !maps.Equal(got, want) {
		t.Fatalf("ClientServers = %v, %v; want %v", got, err, want)
	}

	if err := c.TerminateClient(t.Context(), srv, 981); err != nil {
		t.Fatalf("TerminateClient(%d, 981) = %v", srv, err)
	}
	got, err = c.ClientServers(t.Context())
	if want := map[int]int{982: srv}; err != nil || !maps.Equal(got, want) {
		t.Fatalf("after terminating 981: ClientServers = %v, %v; want %v (982 untouched)", got, err, want)
	}

	err = c.TerminateClient(t.Context(), srv, 981)
	if !errors.Is(err, mps.ErrClientNotFound) || !strings.Contains(err.Error(), "981") {
		t.Errorf("terminating 981 again = %v, want ErrClientNotFound naming 981", err)
	}
	err = c.TerminateClient(t.Context(), 999999, 982)
	if !errors.Is(err, mps.ErrServerNotFound) || !strings.Contains(err.Error(), "999999") {
		t.Errorf("terminating on server 999999 = %v, want ErrServerNotFound naming it", err)
	}

	if err := c.Quit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ClientServers(t.Context()); !errors.Is(err, mps.ErrNoDaemon) {
		t.Errorf("ClientServers without a daemon = %v, want ErrNoDaemon", err)
	}
}
