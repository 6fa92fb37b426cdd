//go:build cgo

package nvml

import (
	"log/slog"
	"os"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/gpu"
)

// TestRealNVML reads the GPUs of the host it runs on. It needs the NVIDIA
// driver, so it runs only when asked: MPS_DAEMON_REAL_NVML=1 go test -run Real.
func TestRealNVML(t *testing.T) {
	if os.Getenv("MPS_DAEMON_REAL_NVML") == "" {
		t.Skip("set MPS_DAEMON_REAL_NVML=1 on a host with an NVIDIA GPU")
	}
	a, err := New(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	}()
	got, err := a.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 {
		t.Fatal("no GPUs")
	}
	for _, g := range got {
		t.Logf("%+v pci=%s vendor:device=%s memory=%dMiB arch=%s mode=%s", g, g.PCI, g.VendorDeviceID(), g.MemoryTotal.MiB(), g.Architecture, g.ComputeMode)
		if !strings.HasPrefix(g.UUID.String(), "GPU-") || g.PCIVendorID != 0x10de || g.MemoryTotal == 0 ||
			g.Architecture == gpu.ArchUnknown || g.Name == "" {
			t.Errorf("implausible GPU %+v", g)
		}
		// Seen on an H200: an empty list before any MPS client.
		procs, err := a.MPSProcesses(t.Context(), g.UUID)
		if err != nil {
			t.Errorf("MPSProcesses(%s): %v", g.UUID, err)
		}
		t.Logf("MPS clients on %s: %+v", g.UUID, procs)
		// Setting the mode it already has exercises the call without
		// changing the host; still a compute-mode call, so only where its
		// owner allows it (never on the shared GPU machines).
		if os.Getenv("MPS_DAEMON_REAL_NVML_SET_MODE") != "" {
			if err := a.SetComputeMode(t.Context(), g.UUID, g.ComputeMode); err != nil {
				t.Errorf("SetComputeMode(%s, %s): %v", g.UUID, g.ComputeMode, err)
			}
		}
	}
}
