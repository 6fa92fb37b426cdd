package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"yunion.io/x/mps-daemon/internal/testsupport/process"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
	"yunion.io/x/mps-daemon/pkg/status"
)

// TestPodCannotQuitOrReconfigureMPS (issue 45): the daemon on the
// simulated host in the single pipe layout, the one Cloudpods' pods use.
// A "pod" is this test binary started again in a user and mount namespace
// of its own, holding the pipe root as Cloudpods' host agent gives it
// (read-write, CUDA_MPS_PIPE_DIRECTORY=<root>) and not the daemon's private
// directory (an empty tmpfs over it): it runs the simulated control client
// and a CUDA client. It cannot quit the control daemon nor set its
// defaults, and its client is served; the thread percentage it sets on its
// server is noticed and put back, and /status and /metrics count its
// commands.
func TestPodCannotQuitOrReconfigureMPS(t *testing.T) {
	if os.Getenv("E2E_POD_PIPE") != "" {
		podActions(t)
		return
	}
	_, url := startInventory(t, "127.0.0.1:0")
	daemonAddr := freePort(t)
	e := newEnv(t, url, daemonAddr)
	appendConf(t, e, "mps_pipe_layout: single\nmps_health_interval: 1s\n")
	d := startDaemon(t, e)
	pipe := filepath.Join(e.dir, "pipe")
	private := mps.PrivilegedRoot(pipe)
	st := waitStatus(t, daemonAddr, func(st status.Status) bool { return st.Ready && following(st) }, d)
	for _, g := range st.GPUs {
		if g.PipeDirectory != pipe || g.PrivilegedSocketReachable {
			t.Fatalf("GPU %s: pipe directory %s, privileged socket reachable %v (%s)", g.UUID, g.PipeDirectory, g.PrivilegedSocketReachable, g.PrivilegedSocketReason)
		}
	}
	if fi, err := os.Lstat(filepath.Join(private, mps.PrivilegedSocket)); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o755 {
		t.Fatalf("the private directory's %s: %v, %v", mps.PrivilegedSocket, fi, err)
	}
	if fi, err := os.Stat(private); err != nil || fi.Mode().Perm() != 0o700 || strings.HasPrefix(private, pipe+"/") {
		t.Fatalf("private directory %s: %v, %v; want 0700, outside the pipe root", private, fi, err)
	}
	sim := mpssim.New(nil)
	controlPID := func() string {
		b, _ := os.ReadFile(filepath.Join(pipe, "nvidia-cuda-mps-control.pid"))
		return string(b)
	}
	before := controlPID()

	out := runPod(t, pipe, private, st.GPUs[0].UUID)
	for _, want := range []string{"quit: " + mps.MsgQuitRefused, "set_default_active_thread_percentage: Insufficient privileges for UID ",
		"set_default_device_pinned_mem_limit: Insufficient privileges for UID ", "private directory: empty", "client: served", "set_active_thread_percentage: 12.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("the pod's output lacks %q:\n%s", want, out)
		}
	}
	server := podField(out, "server")
	srv, err := strconv.Atoi(server)
	if err != nil {
		t.Fatalf("the pod's server %q:\n%s", server, out)
	}

	// The control daemon runs on (not quit, not started again), its
	// defaults are the daemon's, the pod's share is put back.
	own, err := sim.ExactDefaults(pipe)
	if err != nil {
		t.Fatal(err)
	}
	if own.ThreadPercentage == 12 || own.ThreadPercentage == 1 {
		t.Fatalf("the control daemon's defaults %+v: the pod's reached them", own)
	}
	eventually(t, "the pod's thread percentage put back", func() (bool, string) {
		got, err := sim.EnforcedLimits(pipe, srv)
		return err == nil && got.ThreadPercentage == own.ThreadPercentage, fmt.Sprintf("%+v %v, want %v", got, err, own.ThreadPercentage)
	})
	if after := controlPID(); after != before || before == "" {
		t.Errorf("control daemon pid file %q, then %q: want the same daemon", before, after)
	}
	st = waitStatus(t, daemonAddr, func(st status.Status) bool {
		return foreign(st, "daemon") >= 3 && foreign(st, "server") >= 1
	}, d)
	if !st.Ready {
		t.Errorf("not ready after the pod's commands: %s", st.LastError)
	}
	code, metrics := get("http://" + daemonAddr + "/metrics")
	for _, want := range []string{`mps_daemon_foreign_control_commands_total{Hostname="e2e-host",kind="daemon"} 3`, `mps_daemon_foreign_control_commands_total{Hostname="e2e-host",kind="server"} 1`,
		"mps_gpu_privileged_socket_reachable{"} {
		if code != 200 || !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	d.logs(t, "MPS control command not sent by this daemon")
	d.logs(t, "limits another program changed are put back")
}

// following: every control.log is followed.
func following(st status.Status) bool {
	if st.Accounting == nil || st.Accounting.NewClients == nil || len(st.Accounting.NewClients.Logs) == 0 {
		return false
	}
	for _, l := range st.Accounting.NewClients.Logs {
		if !l.Following {
			return false
		}
	}
	return true
}

// foreign is how many commands of kind other programs sent, by /status.
func foreign(st status.Status, kind string) uint64 {
	var n uint64
	if st.Accounting != nil && st.Accounting.NewClients != nil {
		for _, l := range st.Accounting.NewClients.Logs {
			n += l.ForeignCommands[kind]
		}
	}
	return n
}

// runPod runs podActions in a user and mount namespace of its own, with
// the private directory hidden; its output is "name: answer" lines.
func runPod(t *testing.T, pipe, private, gpu string) string {
	t.Helper()
	return process.InNamespace(t, "TestPodCannotQuitOrReconfigureMPS", "E2E_BIN_DIR="+binDir, "E2E_POD_PIPE="+pipe, "E2E_POD_PRIVATE="+private, "E2E_POD_GPU="+gpu)
}

func podField(out, name string) string {
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "POD "+name+": "); ok {
			return v
		}
	}
	return ""
}

// podActions is the pod: what it reaches, and what it is answered.
func podActions(t *testing.T) {
	pipe, private, gpu := os.Getenv("E2E_POD_PIPE"), os.Getenv("E2E_POD_PRIVATE"), os.Getenv("E2E_POD_GPU")
	// The pod's view: the pipe root, not the private directory.
	if err := unix.Mount("none", private, "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatalf("hiding the private directory: %v", err)
	}
	say := func(name, v string) { fmt.Printf("POD %s: %s\n", name, v) }
	if entries, err := os.ReadDir(private); err == nil && len(entries) == 0 {
		say("private directory", "empty")
	}
	sim := mpssim.New(nil)
	env := mps.Env{PipeDir: pipe}
	run := func(cmd string) string {
		out, err := sim.Run(context.Background(), env, cmd)
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		return strings.TrimSpace(out.Stdout + out.Stderr)
	}
	for _, cmd := range []string{"quit", "set_default_active_thread_percentage 1", "set_default_device_pinned_mem_limit 0 999999M"} {
		say(strings.Fields(cmd)[0], run(cmd))
	}
	v, err := sim.Connect(os.Getpid(), []string{"CUDA_MPS_PIPE_DIRECTORY=" + pipe, "NVIDIA_VISIBLE_DEVICES=" + gpu})
	if err != nil {
		t.Fatalf("the pod's client: %v", err)
	}
	say("client", "served")
	say("server", strconv.Itoa(v.ServerPID))
	say("set_active_thread_percentage", run("set_active_thread_percentage "+strconv.Itoa(v.ServerPID)+" 12"))
}
