package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/units"
)

const onlyFirst = `devices:
- path: 0000:1A:00.0
  type: NVIDIA_MPS
  virtual_number: 4
`

// The single layout on a host where CUDA numbers the GPUs opposite to their
// PCI order: one control daemon in the pipe root itself, each GPU's cap on
// the GPU (checked per UUID in the simulated server), the larger thread
// share for all; and a GPU added while a client is connected waits for the
// daemon to be idle instead of killing the client.
func TestSingleLayoutCapsLandOnEachGPU(t *testing.T) {
	h := newHarness(t, "mps_pipe_layout: single\n", onlyFirst)
	gpus := twoGPUs()
	h.runner.SetCUDAOrder([]string{gpus[1].UUID.String(), gpus[0].UUID.String()})
	ctx := context.Background()
	root := filepath.Join(h.dir, "pipe")

	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, gpus[0].UUID.String())); err == nil {
		t.Fatal("a per-GPU pipe directory in the single layout")
	}
	if got, _ := mps.RecordedDevices(root); got != gpus[0].UUID.String() {
		t.Fatalf("single daemon started for %q, want the planned GPU %s", got, gpus[0].UUID.String())
	}
	// A client connects; then the second GPU joins the configuration.
	srv, err := h.runner.AddClient(root, 5001)
	if err != nil {
		t.Fatal(err)
	}
	df, err := config.ParseDevices(filepath.Join(h.dir, "devices.yml"), []byte(fourAndTwo))
	if err != nil {
		t.Fatal(err)
	}
	h.cfg.Devices = df
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatalf("GPU added under a busy single daemon: %v, want the GPU unhealthy, not a failed reconcile", err)
	}
	st := h.agent.Status()
	if !st.GPUs[0].Healthy || st.GPUs[1].Healthy || !strings.Contains(st.GPUs[1].Reason, "once no client is connected") {
		t.Fatalf("first GPU healthy %v, added GPU healthy %v (%q): want the running one served, the new one waiting for the clients", st.GPUs[0].Healthy, st.GPUs[1].Healthy, st.GPUs[1].Reason)
	}
	for _, d := range h.devices() {
		if d.DevicePath == gpus[1].UUID.String() && !d.Unhealthy {
			t.Errorf("device %s of the waiting GPU offered as healthy", d.Addr)
		}
	}
	if l, err := h.runner.EnforcedLimitsOn(root, srv, gpus[0].UUID.String()); err != nil || l.MemoryLimit != h200Memory/4 {
		t.Fatalf("the connected client's server: %+v %v, want GPU 0's cap %v kept", l, err, h200Memory/4)
	}

	// The client leaves: the daemon restarts with both GPUs, the one of the
	// larger cap first (ordinal 0 holds the largest cap: a container sees
	// its own GPU alone, as ordinal 0), each capped on its own ordinal
	// whatever CUDA's own order.
	if err := h.runner.RemoveClient(root, 5001); err != nil {
		t.Fatal(err)
	}
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := mps.RecordedDevices(root); got != gpus[1].UUID.String()+","+gpus[0].UUID.String() {
		t.Fatalf("daemon serves %q, want both GPUs, GPU 1 (cap %v) before GPU 0 (cap %v)", got, h200Memory/2, h200Memory/4)
	}
	srv, err = h.runner.AddClient(root, 5002)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []units.MiB{h200Memory / 4, h200Memory / 2} {
		l, err := h.runner.EnforcedLimitsOn(root, srv, gpus[i].UUID.String())
		if err != nil {
			t.Fatal(err)
		}
		if l.MemoryLimit != want || l.ThreadPercentage != 50 {
			t.Errorf("GPU %d (%s): %v at %v%%, want %v at 50%% (the largest share, 100/2)", i, gpus[i].UUID.String(), l.MemoryLimit, l.ThreadPercentage, want)
		}
	}
	for _, d := range h.devices() {
		if d.MPSThreadPercentage != 100/map[string]int{gpus[0].UUID.String(): 4, gpus[1].UUID.String(): 2}[d.DevicePath] {
			t.Errorf("row %s: thread percentage %d, want its GPU's own policy value", d.Addr, d.MPSThreadPercentage)
		}
	}
	// The CDI spec points every device at the one pipe directory.
	spec, err := os.ReadFile(filepath.Join(h.dir, "cdi", "yunion.io-mps-gpu.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(spec), filepath.Join(root, gpus[0].UUID.String())) || !strings.Contains(string(spec), "CUDA_MPS_PIPE_DIRECTORY="+root) {
		t.Errorf("CDI spec does not use the single pipe directory %s:\n%s", root, spec)
	}
}

// The single layout's one daemon takes the most protective QoS defaults of
// its GPUs: the largest share of any device, and priority 1 as soon as one
// GPU has batch slices (a batch tenant that strips its environment stays
// below normal), while each device keeps its own share and priority in the
// CDI spec.
func TestSingleLayoutTakesTheMostProtectiveQoSDefaults(t *testing.T) {
	const qosOnFirst = `devices:
- path: 0000:1A:00.0
  type: NVIDIA_MPS
  virtual_number: 4
  mps_qos:
    latency: [0]
- path: GPU-00000001-AAAA-BBBB-CCCC-DDDDDDDDDDDD
  type: NVIDIA_MPS
  virtual_number: 2
`
	h := newHarness(t, "mps_pipe_layout: single\n", qosOnFirst) // thread policy even
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(h.dir, "pipe")
	for cmd, want := range map[string]string{"get_default_client_priority": "1", "get_default_active_thread_percentage": "50.0"} {
		out, err := h.runner.Run(ctx, mps.Env{PipeDir: root}, cmd)
		if err != nil || strings.TrimSpace(out.Stdout) != want {
			t.Errorf("%s of the single daemon: %q %v, want %s", cmd, out.Stdout, err, want)
		}
	}
	spec, err := os.ReadFile(filepath.Join(h.dir, "cdi", "yunion.io-mps-gpu.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// GPU 0 at even, N=4: every slice 25% (the batch share (100-8)/3 is
	// larger, so the policy's stands), slices 1-3 at priority 1; GPU 1 50%.
	for _, want := range []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50", "CUDA_MPS_CLIENT_PRIORITY=1", "CUDA_MPS_CLIENT_PRIORITY=0"} {
		if !strings.Contains(string(spec), want) {
			t.Errorf("CDI spec lacks %s", want)
		}
	}
}

// A resize that gives another GPU the largest cap changes the single
// daemon's device list. While a client is connected the daemon keeps its
// list, and a container of either GPU still gets its own device's cap
// (ordinal 0 holds the largest cap of the list running); once the client
// has left, the daemon is restarted with the new list, the GPU of the
// largest cap first, and containers get their own caps again.
func TestSingleLayoutReordersWhenTheLargestCapMoves(t *testing.T) {
	h := newHarness(t, "mps_pipe_layout: single\n", fourAndTwo)
	gpus := twoGPUs()
	ctx := context.Background()
	root := filepath.Join(h.dir, "pipe")
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	list := func() string { got, _ := mps.RecordedDevices(root); return got }
	if got := list(); got != gpus[1].UUID.String()+","+gpus[0].UUID.String() {
		t.Fatalf("daemon serves %q, want GPU 1 (2 devices, the larger cap) first", got)
	}
	container := func(pid, g int, cap units.MiB) {
		t.Helper()
		v, err := h.runner.Connect(pid, []string{"CUDA_MPS_PIPE_DIRECTORY=" + root, "CUDA_VISIBLE_DEVICES=" + gpus[g].UUID.String(),
			fmt.Sprintf("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=%dM", cap)})
		if err != nil || v.MemoryLimits[0] != cap {
			t.Errorf("a container of GPU %d: %+v, %v; want its cap %v", g, v, err, cap)
		}
	}
	container(6001, 0, h200Memory/4) // stays connected
	// GPU 0 now has 1 device (the whole GPU), GPU 1 still 2.
	h.cfg.Devices = mustDevices(t, h.dir, strings.Replace(fourAndTwo, "virtual_number: 4", "virtual_number: 1", 1))
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := list(); got != gpus[1].UUID.String()+","+gpus[0].UUID.String() {
		t.Fatalf("daemon serves %q while a client is connected, want its old list kept", got)
	}
	container(6002, 0, h200Memory)
	container(6003, 1, h200Memory/2)
	for _, pid := range []int{6001, 6002, 6003} {
		if err := h.runner.RemoveClient(root, pid); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := list(); got != gpus[0].UUID.String()+","+gpus[1].UUID.String() {
		t.Fatalf("daemon serves %q once idle, want GPU 0 (now the larger cap) first", got)
	}
	container(6004, 0, h200Memory)
	container(6005, 1, h200Memory/2)
}
