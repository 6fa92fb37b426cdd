package mps

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeControl copies testdata/fake-control.sh into a fresh directory and
// returns an ExecRunner for it, with an Env whose directories exist.
func fakeControl(t *testing.T) (*ExecRunner, Env) {
	t.Helper()
	src, err := os.ReadFile("testdata/fake-control.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "nvidia-cuda-mps-control")
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	env := Env{PipeDir: filepath.Join(dir, "pipe"), LogDir: filepath.Join(dir, "log"), VisibleDevices: "GPU-0757c6d5-b93a-6cd1-29ca-e10c633c5de6"}
	for _, d := range []string{env.PipeDir, env.LogDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r := NewExecRunner(bin).(*ExecRunner)
	r.waitDelay = 100 * time.Millisecond
	return r, env
}

// stopChild kills the background child the fake control left behind, if any.
func stopChild(t *testing.T, env Env) {
	t.Cleanup(func() {
		b, err := os.ReadFile(filepath.Join(env.LogDir, "child.pid"))
		if err != nil {
			return
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

func TestExecRunnerAnswers(t *testing.T) {
	r, env := fakeControl(t)
	cases := []struct {
		command string
		want    Output
	}{
		{"x", Output{Stdout: "Unknown command \"x\"\n"}},
		{"nodaemon", Output{Stderr: "Cannot find MPS control daemon process\n", ExitCode: 1}},
		{"get_server_list", Output{Stdout: "got: get_server_list\n"}},
	}
	for _, c := range cases {
		t.Run(c.command, func(t *testing.T) {
			got, err := r.Run(t.Context(), env, c.command)
			if err != nil {
				t.Fatalf("Run: %v (a non-zero exit is an answer, not an error)", err)
			}
			if got != c.want {
				t.Fatalf("Run(%q) = %+v, want %+v", c.command, got, c.want)
			}
		})
	}
}

func TestExecRunnerChildEnvironment(t *testing.T) {
	r, env := fakeControl(t)
	// Stray MPS settings of our own environment must not reach the control.
	t.Setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "77")
	t.Setenv("CUDA_MPS_PIPE_DIRECTORY", "/wrong/pipe")
	t.Setenv("CUDA_VISIBLE_DEVICES", "3")
	got, err := r.Run(t.Context(), env, "env")
	if err != nil {
		t.Fatal(err)
	}
	want := "pipe=" + env.PipeDir + "\nlog=" + env.LogDir + "\nvisible=" + env.VisibleDevices + "\nthread=unset\npath=set\n"
	if got.Stdout != want {
		t.Fatalf("the control saw\n%s\nwant\n%s", got.Stdout, want)
	}
}

func TestChildEnv(t *testing.T) {
	parent := []string{"PATH=/bin", "CUDA_MPS_PIPE_DIRECTORY=/old", "CUDA_MPS_CLIENT_PRIORITY=1",
		"CUDA_VISIBLE_DEVICES=0", "CUDA_VISIBLE_DEVICES_EXTRA=kept", "HOME=/root"}
	cases := []struct {
		name string
		env  Env
		want []string
	}{
		{"all set", Env{PipeDir: "/p", LogDir: "/l", VisibleDevices: "GPU-1"},
			[]string{"PATH=/bin", "CUDA_VISIBLE_DEVICES_EXTRA=kept", "HOME=/root",
				"CUDA_MPS_PIPE_DIRECTORY=/p", "CUDA_MPS_LOG_DIRECTORY=/l", "CUDA_VISIBLE_DEVICES=GPU-1"}},
		{"empty fields stay unset", Env{PipeDir: "/p"},
			[]string{"PATH=/bin", "CUDA_VISIBLE_DEVICES_EXTRA=kept", "HOME=/root", "CUDA_MPS_PIPE_DIRECTORY=/p"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := childEnv(parent, c.env); !slices.Equal(got, c.want) {
				t.Fatalf("childEnv = %q, want %q", got, c.want)
			}
		})
	}
}

func TestExecRunnerTimeoutNamesCommand(t *testing.T) {
	r, env := fakeControl(t)
	stopChild(t, env)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	// The killed shell's child keeps stdout open: without WaitDelay this
	// would hang until the test binary's own timeout.
	_, err := r.Run(ctx, env, "hang")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v, want a deadline error", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `"hang" timed out after `) {
		t.Fatalf("error %q does not say which command timed out after how long", msg)
	}
}

func TestExecRunnerLingeringChild(t *testing.T) {
	r, env := fakeControl(t)
	stopChild(t, env)
	// The client answered and exited; its background child holding the pipe
	// is cut loose by WaitDelay and the answer is kept.
	got, err := r.Run(t.Context(), env, "linger")
	if err != nil {
		t.Fatal(err)
	}
	if got.Stdout != "25.0\n" || got.ExitCode != 0 {
		t.Fatalf("Run = %+v", got)
	}
}

func TestExecRunnerRefusesSeveralLines(t *testing.T) {
	r, env := fakeControl(t)
	// The control answers only the first line (mps-probe2.txt, "two commands
	// in one session"): a second one would be silently dropped.
	if _, err := r.Run(t.Context(), env, "get_server_list\nquit"); err == nil {
		t.Fatal("Run with two command lines succeeded")
	}
}

func TestExecRunnerStartDetaches(t *testing.T) {
	r, env := fakeControl(t)
	if err := r.Start(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(env.LogDir, "start.txt"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		seen[k] = v
	}
	if seen["sid"] != seen["pid"] {
		t.Errorf("daemon runs in session %s, want its own (pid %s)", seen["sid"], seen["pid"])
	}
	if seen["sid"] == strconv.Itoa(mustSID(t)) {
		t.Errorf("daemon shares our session %s", seen["sid"])
	}
	for _, fd := range []string{"stdout", "stderr"} {
		if seen[fd] != "/dev/null" {
			t.Errorf("daemon %s is %q, want /dev/null", fd, seen[fd])
		}
	}
	if seen["pipe"] != env.PipeDir {
		t.Errorf("daemon pipe directory %q, want %q", seen["pipe"], env.PipeDir)
	}
}

func mustSID(t *testing.T) int {
	t.Helper()
	sid, _, errno := syscall.RawSyscall(syscall.SYS_GETSID, 0, 0, 0)
	if errno != 0 {
		t.Fatal(errno)
	}
	return int(sid)
}

func TestExecRunnerStartFailure(t *testing.T) {
	r, env := fakeControl(t)
	t.Setenv("FAKE_START_EXIT", "1")
	err := r.Start(t.Context(), env)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(env.LogDir, "control.log")) {
		t.Fatalf("Start = %v, want an error pointing at control.log", err)
	}
}

func TestExecRunnerMissingBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "nvidia-cuda-mps-control")
	r := NewExecRunner(bin)
	env := Env{PipeDir: t.TempDir()}
	if err := r.Start(t.Context(), env); err == nil ||
		!strings.Contains(err.Error(), bin) || !strings.Contains(err.Error(), "mps_control_binary") {
		t.Errorf("Start = %v, want an error naming %s and mps_control_binary", err, bin)
	}
	if _, err := r.Run(t.Context(), env, "get_server_list"); err == nil ||
		!strings.Contains(err.Error(), bin) || !strings.Contains(err.Error(), "mps_control_binary") {
		t.Errorf("Run = %v, want an error naming %s and mps_control_binary", err, bin)
	}
}

func TestStartArgs(t *testing.T) {
	if got := startArgs(Env{MultiUser: true}); len(got) != 2 || got[1] != "-multiuser-server" {
		t.Errorf("multi-user start args %v", got)
	}
	if got := startArgs(Env{}); len(got) != 1 || got[0] != "-d" {
		t.Errorf("per-user start args %v", got)
	}
}
