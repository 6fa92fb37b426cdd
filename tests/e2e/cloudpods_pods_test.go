package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/gpu/nvmlsim"
	"yunion.io/x/mps-daemon/pkg/inventory/client"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/view"
)

// Issue 45: Cloudpods' own pods, made through CRI by a real containerd
// (2.x, runc, cgroupfs, CDI and NRI off, as Cloudpods deploys it) with
// Cloudpods' exact sandbox and container configurations, against the
// daemon on the simulated host in the single pipe layout. The backend is
// mps-inventory: its per-slice rows hold the server's id in guest_id, as
// a Cloudpods region of the per-slice model (4.0.3) does; a GPU row's
// holders by name are pkg/accounting's and pkg/region's tests (no
// recording of a region holds a pod server's attachment to replay).

const (
	serverA = "0b9a2f5e-5a6e-4c3e-9d1f-aa0000000001"
	serverB = "0b9a2f5e-5a6e-4c3e-9d1f-bb0000000002"
	serverC = "0b9a2f5e-5a6e-4c3e-9d1f-cc0000000003"
)

// podHost is a daemon, an inventory and a containerd for Cloudpods' pods.
type podHost struct {
	*env
	ctrd       *containerd
	daemonAddr string
	daemon     *proc
	inv        *client.Client
	pipe       string
	gpu        gpu.UUID
	simRoot    string
	sim        *mpssim.Runner
}

// newPodHost starts containerd (NRI's socket at nriSocket, "" off) and an
// inventory, and writes the daemon's files (extra host.conf lines too);
// the daemon is started by start.
func newPodHost(t *testing.T, nriSocket, extra string) *podHost {
	bin, busybox := requireContainerd(t)
	_, sim, err := nvmlsim.New("8xH100", t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &podHost{ctrd: startContainerd(t, bin, nriSocket), daemonAddr: freePort(t), gpu: sim.GPUs()[0].UUID, sim: mpssim.New(nil)}
	h.ctrd.importImage(busybox)
	_, url := startInventory(t, "127.0.0.1:0")
	h.env = newEnv(t, url, h.daemonAddr)
	h.pipe, h.simRoot = filepath.Join(h.dir, "pipe"), filepath.Join(h.dir, "state", "simulated-host")
	// Cloudpods' host agent mounts the pipe root: it is there before any pod.
	if err := os.MkdirAll(h.pipe, 0o755); err != nil {
		t.Fatal(err)
	}
	appendConf(t, h.env, fmt.Sprintf("mps_pipe_layout: single\nmps_health_interval: 1s\nmps_accounting: enforce\n"+
		"mps_containerd_state_directory: %s\nservers_path: %s\n%s", h.ctrd.state, filepath.Join(h.dir, "servers"), extra))
	h.inv = client.New(client.Options{URL: url, Token: tokenFor(t, url)})
	return h
}

func (h *podHost) start(t *testing.T) {
	h.daemon = startDaemon(t, h.env)
	waitStatus(t, h.daemonAddr, func(st status.Status) bool { return st.Ready && len(st.Devices) > 0 && st.Devices[0].ID != "" }, h.daemon)
}

// attach gives server slice i of GPU 0 (bus 18) in the inventory, as the
// scheduler does, and waits for the daemon's rows to show it.
func (h *podHost) attach(t *testing.T, server string, i int) {
	t.Helper()
	name := fmt.Sprintf("%s::%d", h.gpu, i)
	var id string
	st := waitStatus(t, h.daemonAddr, func(st status.Status) bool { return device(st, name) != nil && device(st, name).ID != "" }, h.daemon)
	id = device(st, name).ID
	if _, err := h.inv.AttachIsolatedDevice(t.Context(), server, id); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, h.daemonAddr, func(st status.Status) bool { d := device(st, name); return d != nil && d.Guest == server }, h.daemon)
}

// clients makes the processes MPS clients of GPU 0 (their control
// daemon's NEW CLIENT lines: the connect check), with what NVML would
// list of their memory.
func (h *podHost) connect(t *testing.T, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		if _, err := h.sim.AddClient(h.pipe, pid); err != nil {
			t.Fatal(err)
		}
	}
}

func (h *podHost) setMemory(t *testing.T, used map[int]uint64) {
	t.Helper()
	var procs []gpu.Process
	for pid, mib := range used {
		procs = append(procs, gpu.Process{PID: pid, UsedMemoryBytes: mib << 20})
	}
	if err := nvmlsim.WriteMPSProcesses(h.simRoot, h.gpu, procs); err != nil {
		t.Fatal(err)
	}
}

func pod(st status.Status, server string) *status.Pod {
	for i := range st.Pods {
		if st.Pods[i].Server == server {
			return &st.Pods[i]
		}
	}
	return nil
}

// A pod is held to its server's slices over all its processes: a pod
// made before the daemon started is found, a process exec'd into a
// container counts with it, one of two pods over its server's one slice
// loses the process that grew, the other within its two slices is left
// alone; a pod's process whose environment lifts its MPS limit is killed
// as it connects; a pod whose server holds nothing of the GPU is reported
// and left running. /status, `mps-daemon status` and /metrics list the
// pods by server; terminations name the server.
func TestCloudpodsPodsAreHeldToTheirServersSlices(t *testing.T) {
	h := newPodHost(t, "", "")
	// GPU 0 is split in four: 20480 MiB each.
	const capMiB = 20480
	podA := h.ctrd.runPod(serverA, "gpu-pod-a", string(h.gpu), h.pipe)
	ctrA := podA.container("main", []string{"sh", "-c", "sleep 2001 & sleep 2002 & wait"})
	a1, a2 := pidOf(t, ctrA, "sleep 2001"), pidOf(t, ctrA, "sleep 2002")

	h.start(t) // after pod A
	h.attach(t, serverA, 0)
	h.attach(t, serverB, 1)
	h.attach(t, serverB, 2)

	podB := h.ctrd.runPod(serverB, "gpu-pod-b", string(h.gpu), h.pipe)
	ctrB := podB.container("main", []string{"sh", "-c", "sleep 3001 & wait"})
	b1 := pidOf(t, ctrB, "sleep 3001")
	// A process added to the running container with exec: the runtime
	// puts it in the container's cgroup, as a child of the runtime.
	ex := exec.Command(filepath.Join(h.ctrd.bin, "crictl"), "--runtime-endpoint", "unix://"+h.ctrd.sock, "exec", ctrB, "sleep", "3002")
	if err := ex.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ex.Process.Kill(); _ = ex.Wait() })
	b2 := pidOf(t, ctrB, "sleep 3002")

	used := map[int]uint64{a1: 12288, a2: 6144, b1: 14336, b2: 14336}
	h.connect(t, a1, a2, b1, b2)
	h.setMemory(t, used)
	st := waitStatus(t, h.daemonAddr, func(st status.Status) bool {
		pa, pb := pod(st, serverA), pod(st, serverB)
		return pa != nil && pb != nil && pa.Clients == 2 && pb.Clients == 2 && pa.UsedBytes == (12288+6144)<<20 && pb.UsedBytes == 2*14336<<20
	}, h.daemon)
	if pa := pod(st, serverA); pa.ServerName != "gpu-pod-a" || pa.Slices != 1 || pa.MemoryLimit != capMiB<<20 || pa.OverCap || pa.GPU != string(h.gpu) {
		t.Errorf("pod A: %+v, want one slice of %d MiB, within it", pa, capMiB)
	}
	if pb := pod(st, serverB); pb.Slices != 2 || pb.MemoryLimit != 2*capMiB<<20 || pb.OverCap {
		t.Errorf("pod B: %+v, want two slices, within them", pb)
	}
	if st.Accounting == nil || st.Accounting.Clients["pod"] != 4 || len(st.Accounting.Unknown) != 0 {
		t.Errorf("accounting %+v, want the four clients billed by their pod", st.Accounting)
	}

	// Pod A's second process grows past its server's one slice: it is
	// terminated, a real process by the daemon; pod B is untouched.
	used[a2] = 10240
	h.setMemory(t, used)
	eventually(t, "pod A's growing process terminated", func() (bool, string) { return !alive(a2), tail(h.daemon.Output(), 3000) })
	delete(used, a2)
	h.setMemory(t, used)
	for name, pid := range map[string]int{"pod A's first": a1, "pod B's": b1, "pod B's exec'd": b2} {
		if !alive(pid) {
			t.Errorf("%s process (PID %d) was terminated", name, pid)
		}
	}
	for _, w := range []string{"Cloudpods pod over its server's memory cap", "server=" + serverA, fmt.Sprintf("pid=%d", a2)} {
		if !strings.Contains(h.daemon.Output(), w) {
			t.Errorf("the daemon's log lacks %q", w)
		}
	}

	// A container of pod B whose environment lifts its MPS memory limit:
	// killed as it connects.
	ctrE := podB.container("escaper", []string{"sleep", "3003"}, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=x")
	esc := pidOf(t, ctrE, "sleep 3003")
	h.connect(t, esc)
	eventually(t, "pod B's limit escape killed at connect", func() (bool, string) { return !alive(esc), tail(h.daemon.Output(), 3000) })
	for _, w := range []string{"cause=limit_escape", "detected=connect", "server=" + serverB} {
		if !strings.Contains(h.daemon.Output(), w) {
			t.Errorf("the escape's termination is not logged with %q", w)
		}
	}

	// A pod whose server holds no slice of the GPU: reported, not touched.
	podC := h.ctrd.runPod(serverC, "gpu-pod-c", string(h.gpu), h.pipe)
	ctrC := podC.container("main", []string{"sleep", "4001"})
	c1 := pidOf(t, ctrC, "sleep 4001")
	h.connect(t, c1)
	used[c1] = 30000
	h.setMemory(t, used)
	st = waitStatus(t, h.daemonAddr, func(st status.Status) bool {
		for _, u := range st.Accounting.Unknown {
			if u.PID == c1 && u.Server == serverC && strings.Contains(u.Reason, "holds no slice") {
				return true
			}
		}
		return false
	}, h.daemon)
	if !alive(c1) {
		t.Errorf("pod C's process, whose server holds nothing, was terminated")
	}

	var terms []status.Termination
	for _, tm := range st.Accounting.Terminations {
		if tm.Server != "" {
			terms = append(terms, tm)
		}
	}
	if len(terms) != 2 || terms[0].PID != a2 || terms[0].Server != serverA || terms[0].Cause != "memory_cap" ||
		terms[1].PID != esc || terms[1].Server != serverB || terms[1].Cause != "limit_escape" {
		t.Errorf("terminations %+v, want pod A's memory cap then pod B's limit escape, each naming its server", st.Accounting.Terminations)
	}
	out, errOut, rc := run(t, nil, "mps-daemon", "status", "--config", h.hostConf)
	if rc != 0 {
		t.Fatalf("mps-daemon status: %s", errOut)
	}
	for _, w := range []string{"Cloudpods pods", serverB + "  gpu-pod-b", "limit_escape"} {
		if !strings.Contains(out, w) {
			t.Errorf("mps-daemon status lacks %q:\n%s", w, out)
		}
	}
	_, metrics := get("http://" + h.daemonAddr + "/metrics")
	if v, ok := sample(metrics, "mps_pod_memory_used_bytes", `server="`+serverB+`"`); !ok || v != 2*14336<<20 {
		t.Errorf("/metrics: pod B's use %v (%v), want %d", v, ok, 2*14336<<20)
	}
}

// sample is the value of the series name whose labels hold label.
func sample(metrics, name, label string) (float64, bool) {
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, name+"{") && strings.Contains(l, label) {
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			return v, err == nil
		}
	}
	return 0, false
}

// With NRI on in containerd (a second configuration) and the daemon's
// plugin (mps_nri), a Cloudpods pod's container is made with its slice's
// edits: the slice's environment over Cloudpods', the identity file, the
// privileged socket masked, the view; a pod whose server holds nothing
// is made as Cloudpods asked.
func TestCloudpodsPodsGetTheSliceWithNRI(t *testing.T) {
	nriSocket := filepath.Join(os.TempDir(), fmt.Sprintf("mps-nri-%d.sock", time.Now().UnixNano()))
	t.Cleanup(func() { os.Remove(nriSocket) })
	h := newPodHost(t, nriSocket, "mps_nri: true\nmps_nri_socket: "+nriSocket+"\n")
	lib := filepath.Join(h.dir, "lib", "libyunion-mps-view.so")
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, []byte("the view library stands here; nothing in a static busybox loads it"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The privileged socket must be there to be masked (the real control
	// daemon makes it; the simulated one does not).
	if err := os.WriteFile(filepath.Join(h.pipe, "control_privileged"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h.start(t)
	h.attach(t, serverA, 1)
	eventually(t, "the NRI plugin registered", func() (bool, string) {
		return strings.Contains(h.daemon.Output(), "NRI plugin registered"), tail(h.daemon.Output(), 2000)
	})
	script := `echo "ENV $CUDA_MPS_PINNED_DEVICE_MEM_LIMIT|$CUDA_VISIBLE_DEVICES|$YUNION_MPS_VIRTUAL_DEVICE|$CUDA_MPS_PIPE_DIRECTORY"
echo "IDENTITY $(cat /run/yunion-mps/devices/$NVIDIA_VISIBLE_DEVICES 2>&1)"
echo "PRIVILEGED $(stat -c '%F %t:%T' $CUDA_MPS_PIPE_DIRECTORY/control_privileged 2>&1)"
echo "PIPE_RW $(touch $CUDA_MPS_PIPE_DIRECTORY/x 2>/dev/null && echo yes || echo no)"
echo "PRELOAD $(cat /etc/ld.so.preload 2>&1)"
echo "LIBRARY $(test -s /run/yunion-mps/lib/p/$(uname -m)/libyunion-mps-view.so && echo present || echo missing)"
echo "VIEW $(cat /run/yunion-mps/view/$NVIDIA_VISIBLE_DEVICES/memory 2>&1 | tr '\n' ' ')"
echo DONE; sleep 3600`
	podA := h.ctrd.runPod(serverA, "gpu-pod-a", string(h.gpu), h.pipe)
	ctrA := podA.container("main", []string{"sh", "-c", script})
	podC := h.ctrd.runPod(serverC, "gpu-pod-c", string(h.gpu), h.pipe)
	podC.container("main", []string{"sh", "-c", script})
	var outA, outC string
	eventually(t, "the pods' containers ran", func() (bool, string) {
		outA, outC = podA.logOf("main"), podC.logOf("main")
		return strings.Contains(outA, "DONE") && strings.Contains(outC, "DONE"), outA + "\n" + outC
	})
	slice := fmt.Sprintf("%s::1", h.gpu)
	for _, w := range []string{
		fmt.Sprintf("ENV 0=20480M|%s|%s|%s", h.gpu, slice, h.pipe),
		"IDENTITY " + slice,
		"PRIVILEGED character special file 1:3",
		"PIPE_RW no",
		"PRELOAD " + strings.TrimSpace(string(view.PreloadContent())),
		"LIBRARY present", // the name the preload list makes of $PLATFORM here
		"VIEW total_bytes " + fmt.Sprint(20480<<20),
	} {
		if !strings.Contains(outA, w) {
			t.Errorf("pod A's container does not show %q:\n%s", w, outA)
		}
	}
	for _, w := range []string{"ENV ||", "PIPE_RW yes", "IDENTITY cat:"} {
		if !strings.Contains(outC, w) {
			t.Errorf("pod C (its server holds nothing) shows other than Cloudpods gave it, %q missing:\n%s", w, outC)
		}
	}
	if !strings.Contains(h.daemon.Output(), "given its slice's edits") {
		t.Errorf("the daemon does not log the edits")
	}

	// What the pod's clients use shows in the view its containers were
	// given (they are billed to the pod, the view is the slice's).
	client := pidOf(t, ctrA, "sleep 3600")
	h.connect(t, client)
	h.setMemory(t, map[int]uint64{client: 4096})
	viewFile := filepath.Join(h.dir, "state", "view", string(h.gpu)+".1", "memory")
	eventually(t, "the pod's use in its slice's view", func() (bool, string) {
		b, _ := os.ReadFile(viewFile)
		return strings.Contains(string(b), fmt.Sprintf("used_bytes %d", 4096<<20)), string(b)
	})
}
