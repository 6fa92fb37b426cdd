package agent

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/status"
)

// foreignCount is how many commands of kind another program sent the
// control daemons, as the status says.
func foreignCount(s status.Status, kind string) uint64 {
	var n uint64
	if nc := newClients(s); nc != nil {
		for _, l := range nc.Logs {
			n += l.ForeignCommands[kind]
		}
	}
	return n
}

// In both pipe layouts, with the agent's loops running: each control
// daemon's privileged socket is out of its pipe directory (the status says
// so); a process given only the pipe directory (a Cloudpods pod) cannot
// quit the daemon or set its defaults, and is served; the commands it sends
// a server are noticed and counted, and the server's thread percentage and
// pinned memory it changed are put back to the daemon's own, a change
// right after a put-back too.
func TestForeignCommandsRefusedNoticedAndUndone(t *testing.T) {
	for _, layout := range []string{"single", "per-gpu"} {
		t.Run(layout, func(t *testing.T) {
			h := newHarness(t, "mps_pipe_layout: "+layout+"\n"+connectTick, fourAndTwo)
			h.runLoops(t)
			gpu0 := twoGPUs()[0].UUID.String()
			pipe := h.pipeDir(0)
			if layout == "single" {
				pipe = filepath.Join(h.dir, "pipe")
			}
			for _, g := range h.agent.Status().GPUs {
				if g.PrivilegedSocketReachable || g.PrivilegedSocketReason != "" {
					t.Errorf("GPU %s: privileged socket reachable %v (%s)", g.UUID, g.PrivilegedSocketReachable, g.PrivilegedSocketReason)
				}
			}
			if fi, err := os.Lstat(filepath.Join(pipe, mps.PrivilegedSocket)); err != nil || fi.Mode().Perm() != 0 {
				t.Fatalf("the pipe directory's %s: %v, %v; want the placeholder", mps.PrivilegedSocket, fi, err)
			}
			pod := func(cmd string) string {
				t.Helper()
				out, err := h.runner.Run(context.Background(), mps.Env{PipeDir: pipe}, cmd)
				if err != nil {
					t.Fatal(err)
				}
				return strings.TrimSpace(out.Stdout)
			}
			if out := pod("quit"); out != mps.MsgQuitRefused {
				t.Errorf("quit from the pipe directory: %q", out)
			}
			if out := pod("set_default_active_thread_percentage 100"); !strings.HasPrefix(out, "Insufficient privileges") {
				t.Errorf("set_default_active_thread_percentage from the pipe directory: %q", out)
			}
			// The pod's client is served; its server has the daemon's limits.
			v, err := h.runner.Connect(990001, []string{"CUDA_MPS_PIPE_DIRECTORY=" + pipe, "CUDA_VISIBLE_DEVICES=" + gpu0})
			if err != nil {
				t.Fatalf("a pod's client: %v", err)
			}
			own, err := h.runner.EnforcedLimitsOn(pipe, v.ServerPID, gpu0)
			if err != nil || own.ThreadPercentage == 12 || own.MemoryLimit == 0 {
				t.Fatalf("the server's own limits %+v, %v", own, err)
			}
			srv := strconv.Itoa(v.ServerPID)
			ordinal := "0"
			if layout == "single" {
				i, _ := mps.Ordinal(mustRecorded(t, pipe), gpu0)
				ordinal = strconv.Itoa(i)
			}
			if out := pod("set_active_thread_percentage " + srv + " 12"); out != "12.0" {
				t.Fatalf("set_active_thread_percentage from the pipe directory: %q", out)
			}
			pod("set_device_pinned_mem_limit " + srv + " " + ordinal + " 999999M")
			waitFor(t, "the server's limits put back", func() bool {
				got, err := h.runner.EnforcedLimitsOn(pipe, v.ServerPID, gpu0)
				return err == nil && got.ThreadPercentage == own.ThreadPercentage && got.MemoryLimit == own.MemoryLimit
			})
			waitFor(t, "the foreign commands counted", func() bool {
				s := h.agent.Status()
				return foreignCount(s, "daemon") == 2 && foreignCount(s, "server") == 2
			})
			var last string
			for _, l := range newClients(h.agent.Status()).Logs {
				last += l.LastForeign
			}
			if !strings.Contains(last, "set_device_pinned_mem_limit "+srv) {
				t.Errorf("the last foreign command: %q", last)
			}
			// A change right after that put-back, within the least time
			// between two put-backs of a server (acctloop.DefaultPutBackEvery),
			// is put back too, once that time is up.
			pod("set_active_thread_percentage " + srv + " 13")
			waitFor(t, "a change right after a put-back put back", func() bool {
				got, err := h.runner.EnforcedLimitsOn(pipe, v.ServerPID, gpu0)
				return err == nil && got.ThreadPercentage == own.ThreadPercentage && got.MemoryLimit == own.MemoryLimit &&
					foreignCount(h.agent.Status(), "server") == 3
			})
			// The agent's own commands (the put-back's set_* among them,
			// logged after the pod's) are not counted: once a last
			// command of the pod's, logged after them, is counted, the
			// count is the pod's alone.
			if err := h.agent.Reconcile(context.Background()); err != nil {
				t.Fatal(err)
			}
			pod("shutdown_server 1")
			waitFor(t, "the pod's last command counted", func() bool { return foreignCount(h.agent.Status(), "server") >= 4 })
			if s := h.agent.Status(); foreignCount(s, "daemon") != 2 || foreignCount(s, "server") != 4 {
				t.Errorf("after the agent's own commands: %d daemon, %d server foreign commands; want the pod's 2 and 4", foreignCount(s, "daemon"), foreignCount(s, "server"))
			}
			if up, err := h.runner.Run(context.Background(), mps.Env{PipeDir: pipe}, "get_server_list"); err != nil || up.ExitCode != 0 {
				t.Errorf("the control daemon after the pod's quit: %+v, %v", up, err)
			}
		})
	}
}

func mustRecorded(t *testing.T, pipe string) string {
	t.Helper()
	v, ok := mps.RecordedDevices(pipe)
	if !ok {
		t.Fatalf("no device list recorded in %s", pipe)
	}
	return v
}
