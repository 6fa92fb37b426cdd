package mps_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
)

func simEnv(t *testing.T) mps.Env {
	dir := t.TempDir()
	return mps.Env{PipeDir: filepath.Join(dir, "p"), LogDir: filepath.Join(dir, "l"), VisibleDevices: "GPU-1"}
}

func TestEnsureRefusesLongPipeDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	c := mps.NewController(mpssim.New(nil), mps.Env{PipeDir: dir}, time.Second, nil)
	_, err := c.Ensure(t.Context())
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "107") {
		t.Fatalf("Ensure = %v, want an error naming the directory and the 107-byte limit", err)
	}
	if _, statErr := os.Stat(dir); statErr == nil {
		t.Error("Ensure created a pipe directory it refused")
	}
}

func TestEnsureMakesDirectoriesTraversable(t *testing.T) {
	env := simEnv(t)
	// A leaf left 0700 (by hand, or a umask) would lock out clients of other UIDs.
	if err := os.Mkdir(env.PipeDir, 0o700); err != nil {
		t.Fatal(err)
	}
	c := mps.NewController(mpssim.New(nil), env, 5*time.Second, nil)
	if _, err := c.Ensure(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{env.PipeDir, env.LogDir} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o755 {
			t.Errorf("%s has mode %v, want 0755", d, fi.Mode().Perm())
		}
	}
}

// deadRunner is a control whose daemon never comes up.
type deadRunner struct{}

func (deadRunner) Run(context.Context, mps.Env, string) (mps.Output, error) {
	return mps.Output{Stderr: mps.MsgNoDaemon + "\n", ExitCode: 1}, nil
}
func (deadRunner) Start(context.Context, mps.Env) error { return nil }

func TestEnsureDaemonNeverComesUp(t *testing.T) {
	env := simEnv(t)
	c := mps.NewController(deadRunner{}, env, 300*time.Millisecond, nil)
	_, err := c.Ensure(t.Context())
	if err == nil || !strings.Contains(err.Error(), "did not come up") ||
		!strings.Contains(err.Error(), filepath.Join(env.LogDir, "control.log")) {
		t.Fatalf("Ensure = %v, want 'did not come up' pointing at control.log", err)
	}
}

// ignoringRunner is a control that acknowledges memory limits and drops them.
type ignoringRunner struct{ *mpssim.Runner }

func (r ignoringRunner) Run(ctx context.Context, env mps.Env, command string) (mps.Output, error) {
	if strings.HasPrefix(command, "set_default_device_pinned_mem_limit ") {
		return mps.Output{}, nil
	}
	return r.Runner.Run(ctx, env, command)
}

func TestSetDefaultsReadsBack(t *testing.T) {
	cases := []struct {
		name    string
		limits  mps.Limits
		wantErr string // "" = success
	}{
		{"applied", mps.Limits{MemoryLimit: 20389, ThreadPercentage: 25}, ""},
		{"fraction", mps.Limits{MemoryLimit: 512, ThreadPercentage: 33.5}, ""},
		{"no memory limit", mps.Limits{ThreadPercentage: 100}, ""},
		{"percentage too high", mps.Limits{MemoryLimit: 512, ThreadPercentage: 150}, "150"},
		{"percentage zero", mps.Limits{MemoryLimit: 512, ThreadPercentage: 0}, "refused active thread percentage 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctl := mps.NewController(mpssim.New(nil), simEnv(t), 5*time.Second, nil)
			if _, err := ctl.Ensure(t.Context()); err != nil {
				t.Fatal(err)
			}
			err := ctl.SetDefaults(t.Context(), c.limits)
			if c.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				got, err := ctl.Defaults(t.Context())
				if err != nil || got.ThreadPercentage != c.limits.ThreadPercentage ||
					mps.DisplayMemLimit(got.MemoryLimit) != mps.DisplayMemLimit(c.limits.MemoryLimit) {
					t.Fatalf("Defaults = %+v, %v after SetDefaults(%+v)", got, err, c.limits)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("SetDefaults = %v, want an error containing %q", err, c.wantErr)
			}
		})
	}
}

func TestSetDefaultsDetectsDroppedMemoryLimit(t *testing.T) {
	env := simEnv(t)
	ctl := mps.NewController(ignoringRunner{mpssim.New(nil)}, env, 5*time.Second, nil)
	if _, err := ctl.Ensure(t.Context()); err != nil {
		t.Fatal(err)
	}
	err := ctl.SetDefaults(t.Context(), mps.Limits{MemoryLimit: 35942, ThreadPercentage: 25})
	want := "mps limits not applied: pinned memory reads back none, want 35G"
	if err == nil || err.Error() != want {
		t.Fatalf("SetDefaults = %v, want %q", err, want)
	}
}

// blockingRunner answers nothing until its context ends, like a wedged daemon.
type blockingRunner struct{}

func (blockingRunner) Run(ctx context.Context, _ mps.Env, _ string) (mps.Output, error) {
	<-ctx.Done()
	return mps.Output{}, ctx.Err()
}
func (blockingRunner) Start(ctx context.Context, _ mps.Env) error { <-ctx.Done(); return ctx.Err() }

func TestControllerCallsHaveTimeouts(t *testing.T) {
	c := mps.NewController(blockingRunner{}, simEnv(t), 50*time.Millisecond, nil)
	if _, err := c.Servers(t.Context()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Servers on a wedged daemon = %v, want a deadline error", err)
	}
	if _, err := c.Ensure(t.Context()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ensure on a wedged daemon = %v, want a deadline error", err)
	}
	// A server's status unanswered names the likely wedge, for the operator.
	if _, err := c.ServerStatus(t.Context(), 4200001); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), mps.WedgedHint) {
		t.Fatalf("ServerStatus on a wedged daemon = %v, want a deadline error naming the wedge", err)
	}
	// The caller's own deadline passing says nothing of the server.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if _, err := c.ServerStatus(ctx, 4200001); !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), mps.WedgedHint) {
		t.Fatalf("ServerStatus past the caller's deadline = %v, want a deadline error without the wedge", err)
	}
}

func TestControllerLogsEachCommand(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := mps.NewController(mpssim.New(nil), simEnv(t), 5*time.Second, log)
	if up, err := c.Running(t.Context()); err != nil || up {
		t.Fatalf("Running = %v, %v", up, err)
	}
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("want one JSON log line, got %q: %v", buf.String(), err)
	}
	if rec["command"] != "get_server_list" || rec["exit_code"] != float64(1) || rec["duration"] == nil || rec["level"] != "DEBUG" {
		t.Fatalf("log line %v lacks command, exit code or duration", rec)
	}
}

func TestQuitWithoutDaemon(t *testing.T) {
	c := mps.NewController(mpssim.New(nil), simEnv(t), time.Second, nil)
	if err := c.Quit(t.Context()); err != nil {
		t.Fatalf("Quit with no daemon = %v, want nil (already stopped)", err)
	}
}

func TestEnsureAdoptsAfterRestart(t *testing.T) {
	env := simEnv(t)
	first := mps.NewController(mpssim.New(nil), env, 5*time.Second, nil)
	if adopted, err := first.Ensure(t.Context()); err != nil || adopted {
		t.Fatalf("first Ensure = %v, %v", adopted, err)
	}
	if err := first.SetDefaults(t.Context(), mps.Limits{MemoryLimit: 20389, ThreadPercentage: 25}); err != nil {
		t.Fatal(err)
	}
	// The agent restarted: new runner, new controller, same pipe directory.
	second := mps.NewController(mpssim.New(nil), env, 5*time.Second, nil)
	adopted, err := second.Ensure(t.Context())
	if err != nil || !adopted {
		t.Fatalf("Ensure after restart = %v, %v; want the daemon adopted", adopted, err)
	}
	got, err := second.Defaults(t.Context())
	if err != nil || got != (mps.Limits{MemoryLimit: 19 * 1024, ThreadPercentage: 25}) {
		t.Fatalf("adopted daemon's defaults = %+v, %v", got, err)
	}
}
