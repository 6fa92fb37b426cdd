//go:build cgo

package nvmlsim

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"yunion.io/x/mps-daemon/pkg/gpu"
	gpunvml "yunion.io/x/mps-daemon/pkg/gpu/nvml"
	"yunion.io/x/mps-daemon/pkg/units"
)

func newSim(t *testing.T, profile string) (*gpunvml.Adapter, *Host) {
	t.Helper()
	a, h, err := New(profile, t.TempDir(), nil)
	if err != nil {
		t.Fatalf("New(%q): %v", profile, err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	})
	return a, h
}

func TestSimulatedDGXH100(t *testing.T) {
	a, h := newSim(t, "8xH100")
	got, err := a.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	wantBuses := []string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"}
	if len(got) != len(wantBuses) {
		t.Fatalf("%d GPUs, want %d", len(got), len(wantBuses))
	}
	seen := map[string]bool{}
	for i, g := range got {
		if g.PCI.String() != wantBuses[i] {
			t.Errorf("GPU %d at %s, want %s", i, g.PCI, wantBuses[i])
		}
		if g.Index != i || g.Minor != i {
			t.Errorf("GPU at %s: index %d minor %d, want %d", g.PCI, g.Index, g.Minor, i)
		}
		if !strings.HasPrefix(g.UUID.String(), "GPU-") || uuid.Validate(strings.TrimPrefix(g.UUID.String(), "GPU-")) != nil || seen[g.UUID.String()] {
			t.Errorf("GPU %d: UUID %q is not a fresh GPU-<uuid>", i, g.UUID)
		}
		seen[g.UUID.String()] = true
		if g.VendorDeviceID() != "10de:2330" || g.Name != "NVIDIA H100 80GB HBM3" || g.MemoryTotal.MiB() != 81920 ||
			g.Architecture != gpu.ArchHopper || g.PCIeGeneration != 5 || g.PCIeWidth != 16 ||
			g.ComputeMode != gpu.ComputeModeDefault || g.NUMANode != -1 {
			t.Errorf("GPU %d = %+v", i, g)
		}
	}
	if !reflect.DeepEqual(got, h.GPUs()) {
		t.Errorf("adapter reports\n%+v\nSimHost.GPUs says\n%+v", got, h.GPUs())
	}
	if h.Profile() != "8xH100" {
		t.Errorf("Profile = %q", h.Profile())
	}
}

// TestScrambledHost: on "8xH100:scrambled" no GPU has the same place in
// NVML's order, the device minors and PCI order, and everything the daemon
// reads of a GPU agrees on which GPU it is: NVML's index and minor, the
// /dev/nvidiaN node and the render node's link to its PCI device.
func TestScrambledHost(t *testing.T) {
	a, h := newSim(t, "8xH100"+ScrambledSuffix)
	got, err := a.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, h.GPUs()) {
		t.Fatalf("adapter reports\n%+v\nSimHost.GPUs says\n%+v", got, h.GPUs())
	}
	indexes, minors := map[int]bool{}, map[int]bool{}
	r := gpu.Resolver{SysfsRoot: h.SysfsRoot(), DevRoot: h.DevRoot()}
	slices.SortFunc(got, func(x, y gpu.Info) int { return x.PCI.Compare(y.PCI) })
	for slot, g := range got {
		if g.Index == slot || g.Minor == slot || g.Index == g.Minor {
			t.Errorf("GPU %s: PCI place %d, NVML index %d, minor %d: want three different numbers", g.PCI, slot, g.Index, g.Minor)
		}
		indexes[g.Index], minors[g.Minor] = true, true
		checkNode(t, filepath.Join(h.DevRoot(), fmt.Sprintf("nvidia%d", g.Minor)))
		for _, path := range []string{fmt.Sprintf("/dev/nvidia%d", g.Minor), fmt.Sprintf("/dev/dri/renderD%d", 128+slot),
			"/dev/dri/by-path/pci-" + g.PCI.String() + "-render", g.UUID.String(), g.PCI.String()} {
			if r, err := r.Resolve(path, got); err != nil || r.UUID != g.UUID {
				t.Errorf("%s resolves to %s (%v), want GPU %s", path, r.UUID, err, g.UUID)
			}
		}
	}
	if len(indexes) != 8 || len(minors) != 8 {
		t.Errorf("indexes %v, minors %v: want a permutation of 0-7 each", indexes, minors)
	}
	plain, _ := newSim(t, "8xH100")
	p, err := plain.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if p[0].UUID == got[0].UUID {
		t.Errorf("the scrambled host's GPUs have the plain host's UUIDs: a daemon moved from one to the other would take them for the same")
	}
}

func TestSimulatedModels(t *testing.T) {
	for _, tc := range []struct {
		profile      string
		count        int
		vendorDevice string
		memoryMiB    units.MiB
		arch         gpu.Architecture
		pcieGen      int
		mpsClients   int
	}{
		{"8xH200", 8, "10de:2333", 144384, gpu.ArchHopper, 5, 48},
		{"2xa100", 2, "10de:20b2", 81920, gpu.ArchAmpere, 4, 48},
		{"1xB200", 1, "10de:2b00", 184320, gpu.ArchBlackwell, 5, 48},
		{"3xA30", 3, "10de:20b7", 24576, gpu.ArchAmpere, 4, 48},
		{"4xP40", 4, "10de:1b38", 22919, gpu.ArchPascal, 3, 16},
		{"16xH100", 16, "10de:2330", 81920, gpu.ArchHopper, 5, 48},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			a, _ := newSim(t, tc.profile)
			got, err := a.Devices(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.count {
				t.Fatalf("%d GPUs, want %d", len(got), tc.count)
			}
			for i, g := range got {
				if g.Index != i || (i > 0 && !got[i-1].PCI.Less(g.PCI)) {
					t.Errorf("GPU %d (index %d, %s) out of bus order", i, g.Index, g.PCI)
				}
				if g.VendorDeviceID() != tc.vendorDevice || g.MemoryTotal.MiB() != tc.memoryMiB || g.Architecture != tc.arch ||
					g.PCIeGeneration != tc.pcieGen || g.PCIeWidth != 16 || g.Architecture.MaxMPSClients() != tc.mpsClients {
					t.Errorf("GPU %d = %+v", i, g)
				}
			}
		})
	}
}

func TestSimulatedUUIDsAreStable(t *testing.T) {
	// Same profile in any case, another start, another root: same GPUs. This
	// is what keeps the daemon's inventory sync from churning on restart.
	uuids := func(profile string) []string {
		a, _ := newSim(t, profile)
		got, err := a.Devices(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, g := range got {
			out = append(out, g.UUID.String()+"@"+g.PCI.String())
		}
		return out
	}
	first := uuids("8xH100")
	if again := uuids("8xh100"); !reflect.DeepEqual(first, again) {
		t.Errorf("restart changed the GPUs:\n%v\n%v", first, again)
	}
	if other := uuids("8xH200"); reflect.DeepEqual(first, other) {
		t.Errorf("8xH200 has the same UUIDs as 8xH100: %v", other)
	}
}

func TestSimulatedSetComputeMode(t *testing.T) {
	a, h := newSim(t, "4xH100")
	target := h.GPUs()[2].UUID
	if err := a.SetComputeMode(t.Context(), target, gpu.ComputeModeExclusiveProcess); err != nil {
		t.Fatal(err)
	}
	got, err := a.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range got {
		want := gpu.ComputeModeDefault
		if g.UUID == target {
			want = gpu.ComputeModeExclusiveProcess
		}
		if g.ComputeMode != want {
			t.Errorf("GPU %d: compute mode %s, want %s", g.Index, g.ComputeMode, want)
		}
	}
	if !reflect.DeepEqual(got, h.GPUs()) {
		t.Errorf("Host.GPUs does not follow the compute mode: %+v", h.GPUs())
	}

	err = a.SetComputeMode(t.Context(), "GPU-00000000-0000-0000-0000-000000000000", gpu.ComputeModeDefault)
	if err == nil || !strings.Contains(err.Error(), "GPU-00000000-0000-0000-0000-000000000000") {
		t.Errorf("unknown UUID: %v, want an error naming it", err)
	}
	if err := a.SetComputeMode(t.Context(), target, gpu.ComputeMode(7)); err == nil {
		t.Error("compute mode 7 accepted")
	}
}

func TestSimulatedUnknownProfile(t *testing.T) {
	_, _, err := New("8xV100", t.TempDir(), nil)
	if err == nil {
		t.Fatal("8xV100 accepted")
	}
	if !strings.Contains(err.Error(), "V100") || !strings.Contains(err.Error(), "P40") {
		t.Errorf("error %q should name the bad model and the valid ones", err)
	}
}

func TestSimulatedDevicesStopsOnCancel(t *testing.T) {
	a, _ := newSim(t, "2xH100")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := a.Devices(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Devices on a cancelled context: %v", err)
	}
}

func TestSimulatedConcurrentUse(t *testing.T) {
	// The daemon's reconcile loop and its health endpoint use one adapter;
	// -race checks the simulated devices and the adapter for that.
	a, h := newSim(t, "8xH100")
	var wg sync.WaitGroup
	for i, g := range h.GPUs() {
		wg.Go(func() {
			mode := gpu.ComputeModeExclusiveProcess
			if i%2 == 0 {
				mode = gpu.ComputeModeDefault
			}
			if err := a.SetComputeMode(t.Context(), g.UUID, mode); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			if _, err := a.Devices(t.Context()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got, err := a.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		if want := i%2 == 1; (g.ComputeMode == gpu.ComputeModeExclusiveProcess) != want {
			t.Errorf("GPU %d: compute mode %s", i, g.ComputeMode)
		}
	}
}
