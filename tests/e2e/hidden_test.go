package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	tspodman "yunion.io/x/mps-daemon/internal/testsupport/podman"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/gpu/nvmlsim"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
	"yunion.io/x/mps-daemon/pkg/status"
)

// TestPodmanHiddenViewIsTerminated (issue 23): under enforce, on the
// simulated host with Debian 12's Podman,
//   - a container whose first process hides its identity file behind a
//     user and mount namespace of its own (`unshare -Urm`, a tmpfs over
//     /run/yunion-mps: the entrypoint itself, so nothing in the container
//     sees the file) and "allocates" past its device's cap is terminated:
//     no device can be established for it, so it is taken to be over every
//     cap (cause no_device);
//   - a process started in another container by `podman exec` (a child of
//     the runtime, not of the container's processes) that hides its view
//     the same way is billed to its container's device through the other
//     processes of its cgroup (source cgroup), reported, left running;
//   - a process of the host that names no device and uses more than any
//     cap is reported and never touched.
func TestPodmanHiddenViewIsTerminated(t *testing.T) {
	busybox := tspodman.Require(t)
	_, url := startInventory(t, "127.0.0.1:0")
	daemonAddr := freePort(t)
	e := newEnv(t, url, daemonAddr)
	appendConf(t, e, "mps_health_interval: 1s\nmps_accounting: enforce\n")
	d := startDaemon(t, e)
	st := waitStatus(t, daemonAddr, func(st status.Status) bool { return st.Ready && st.CDI != nil && st.CDI.Devices > 0 }, d)
	g0 := st.GPUs[0]
	dev := func(i int) string { return fmt.Sprintf("%s::%d", g0.UUID, i) }
	pm := newPodman(t, filepath.Join(e.dir, "cdi"))
	image := pm.Image(busybox)

	hide := `mount -t tmpfs none /run/yunion-mps && if test -e /run/yunion-mps/devices/$NVIDIA_VISIBLE_DEVICES; then echo VIEW visible; else echo VIEW hidden; fi`
	hider := pm.start("hider", "--device", "yunion.io/mps-gpu="+dev(2), image,
		"unshare", "-Urm", "sh", "-c", hide+` && echo READY && exec sleep 1030`)
	host := pm.start("exec-target", "--device", "yunion.io/mps-gpu="+dev(3), image, "sh", "-c", `echo READY; exec sleep 1040`)
	hider.ready(t)
	host.ready(t)
	if v, _ := hider.field("VIEW"); v != "hidden" {
		t.Fatalf("the hider's own view: %q, want the identity file hidden", v)
	}
	execd := pm.exec(host, "exec-hider", "unshare", "-Urm", "sh", "-c", hide+` && echo "PID_execd $$" && echo READY && exec sleep 1041`)
	execd.ready(t)
	if v, _ := execd.field("VIEW"); v != "hidden" {
		t.Fatalf("the exec'd process's own view: %q, want the identity file hidden", v)
	}
	hiderPID, ok := hider.hostPIDs(t)[1]
	if !ok {
		t.Fatal("no host PID for the hider (PID 1 of its container)")
	}
	execPID := execd.pid(t, "execd")
	// The host's own job: no device named, more than any cap.
	job := exec.Command("sleep", "1050")
	job.Env = []string{"PATH=/usr/bin:/bin"}
	if err := job.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { job.Process.Kill(); job.Wait() })
	jobPID := job.Process.Pid

	const capMiB = 20480
	used := map[int]uint64{hiderPID: capMiB + 10240, execPID: 4096, jobPID: 3 * capMiB}
	sim := mpssim.New(nil)
	var procs []gpu.Process
	for pid, mib := range used {
		if _, err := sim.AddClient(g0.PipeDirectory, pid); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, gpu.Process{PID: pid, UsedMemoryBytes: mib << 20})
	}
	if err := nvmlsim.WriteMPSProcesses(filepath.Join(e.dir, "state", "simulated-host"), gpu.UUID(g0.UUID), procs); err != nil {
		t.Fatal(err)
	}

	// The exec'd process is billed to its container's device by its cgroup.
	st = waitStatus(t, daemonAddr, func(st status.Status) bool {
		d3 := device(st, dev(3))
		return d3 != nil && d3.Measured && d3.UsedBytes == 4096<<20
	}, d)
	var billed bool
	for _, m := range st.Accounting.Mismatches {
		if m.PID == execPID {
			billed = m.Device == dev(3) && m.Source == "cgroup"
			if !billed {
				t.Errorf("the exec'd hider: %+v, want billed to %s by its cgroup", m, dev(3))
			}
		}
	}
	if !billed {
		t.Errorf("the exec'd hider (PID %d) is not among the mismatches: %+v", execPID, st.Accounting.Mismatches)
	}

	// The hider goes as it connects (sim.AddClient writes its control
	// daemon's NEW CLIENT lines): SIGKILL, a real signal to the real
	// process.
	eventually(t, "the hider terminated", func() (bool, string) { return !alive(hiderPID), d.Output() })
	out := d.Output()
	for _, w := range []string{
		"MPS client in a container whose device cannot be established; terminated under enforce",
		fmt.Sprintf("pid=%d", hiderPID), "cause=no_device",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("the daemon's log lacks %q", w)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "accounting: ") && (strings.Contains(l, "pid="+strconv.Itoa(jobPID)+" ") || strings.Contains(l, "pid="+strconv.Itoa(execPID)+" ")) {
			t.Errorf("enforcement touched a process it must not: %s", l)
		}
	}
	if !alive(jobPID) || !alive(execPID) {
		t.Errorf("host job alive %v, exec'd hider alive %v; want both running", alive(jobPID), alive(execPID))
	}
	st = waitStatus(t, daemonAddr, func(st status.Status) bool { return len(st.Accounting.Unknown) > 0 }, d)
	for _, u := range st.Accounting.Unknown {
		if u.PID == jobPID && !strings.Contains(u.Reason, "names no virtual device") {
			t.Errorf("the host job: %+v, want reported as naming no device", u)
		}
	}
}
