package vdev

import (
	"testing"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/pci"
	"yunion.io/x/mps-daemon/pkg/units"
)

func TestMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		total units.MiB
		n     int
		want  units.MiB
	}{
		{"H200 by 4", 143771, 4, 35942},
		{"H100 by 3", 81559, 3, 27186},
		{"P40 by 4", 24576, 4, 6144},
		{"whole GPU", 81559, 1, 81559},
		{"Hopper limit", 143771, 48, 2995},
		{"no split", 81559, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := MemoryLimit(tc.total, tc.n); got != tc.want {
				t.Errorf("MemoryLimit(%v, %d) = %v, want %v", tc.total, tc.n, got, tc.want)
			}
		})
	}
}

func h200(t *testing.T, addr string) gpu.Info {
	t.Helper()
	a, err := pci.Parse(addr)
	if err != nil {
		t.Fatal(err)
	}
	return gpu.Info{
		UUID: "GPU-5b2f1d8e-6c1a-4f0e-9d3b-7a8c9e0f1a2b", Name: "NVIDIA H200", PCI: a,
		PCIVendorID: 0x10de, PCIDeviceID: 0x2335, MemoryTotal: units.MiB(143771).Bytes(),
		Architecture: gpu.ArchHopper, NUMANode: 1, PCIeGeneration: 5, PCIeWidth: 16,
	}
}

func TestSplit(t *testing.T) {
	g := h200(t, "00000000:AF:00.0")
	devs := Split(g, 4, 25, QoS{})
	if len(devs) != 4 {
		t.Fatalf("got %d devices, want 4", len(devs))
	}
	for i, d := range devs {
		want := Device{GPU: g, Index: i, MemoryLimit: 35942, ThreadPercentage: 25}
		if d != want || d.Addr() != []string{"af:00.0-0", "af:00.0-1", "af:00.0-2", "af:00.0-3"}[i] {
			t.Errorf("device %d: got %+v (%s), want %+v", i, d, d.Addr(), want)
		}
	}
	if got := Split(g, 0, 100, QoS{}); got != nil {
		t.Errorf("Split by 0 gave %d devices, want none", len(got))
	}
	if got := Split(g, 1, 100, QoS{}); len(got) != 1 || got[0].Addr() != "af:00.0-0" || got[0].MemoryLimit != 143771 {
		t.Errorf("Split by 1 gave %+v, want the whole GPU as af:00.0-0", got)
	}
}
