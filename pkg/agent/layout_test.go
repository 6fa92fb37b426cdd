package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/mps"
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
	h.runner.SetCUDAOrder([]string{gpus[1].UUID, gpus[0].UUID})
	ctx := context.Background()
	root := filepath.Join(h.dir, "pipe")

	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, gpus[0].UUID)); err == nil {
		t.Fatal("a per-GPU pipe directory in the single layout")
	}
	if got, _ := mps.RecordedDevices(root); got != gpus[0].UUID {
		t.Fatalf("single daemon started for %q, want the planned GPU %s", got, gpus[0].UUID)
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
		if d.DevicePath == gpus[1].UUID && !d.Unhealthy {
			t.Errorf("device %s of the waiting GPU offered as healthy", d.Addr)
		}
	}
	if l, err := h.runner.EnforcedLimitsOn(root, srv, gpus[0].UUID); err != nil || l.PinnedMemMiB != 143771/4 {
		t.Fatalf("the connected client's server: %+v %v, want GPU 0's cap %d kept", l, err, 143771/4)
	}

	// The client leaves: the daemon restarts with both GPUs, each capped on
	// its own ordinal although CUDA's order is the reverse of PCI's.
	if err := h.runner.RemoveClient(root, 5001); err != nil {
		t.Fatal(err)
	}
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := mps.RecordedDevices(root); got != gpus[0].UUID+","+gpus[1].UUID {
		t.Fatalf("daemon serves %q, want both GPUs in PCI order", got)
	}
	srv, err = h.runner.AddClient(root, 5002)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{143771 / 4, 143771 / 2} {
		l, err := h.runner.EnforcedLimitsOn(root, srv, gpus[i].UUID)
		if err != nil {
			t.Fatal(err)
		}
		if l.PinnedMemMiB != want || l.ThreadPercentage != 50 {
			t.Errorf("GPU %d (%s): %d MiB at %v%%, want %d MiB at 50%% (the largest share, 100/2)", i, gpus[i].UUID, l.PinnedMemMiB, l.ThreadPercentage, want)
		}
	}
	for _, d := range h.devices() {
		if d.MPSThreadPercentage != 100/map[string]int{gpus[0].UUID: 4, gpus[1].UUID: 2}[d.DevicePath] {
			t.Errorf("row %s: thread percentage %d, want its GPU's own policy value", d.Addr, d.MPSThreadPercentage)
		}
	}
	// The CDI spec points every device at the one pipe directory.
	spec, err := os.ReadFile(filepath.Join(h.dir, "cdi", "yunion.io-mps-gpu.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(spec), filepath.Join(root, gpus[0].UUID)) || !strings.Contains(string(spec), "CUDA_MPS_PIPE_DIRECTORY="+root) {
		t.Errorf("CDI spec does not use the single pipe directory %s:\n%s", root, spec)
	}
}
