package vdev

import (
	"encoding/json"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/golden"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/pci"
)

const mib = 1024 * 1024

func TestMemoryLimitMiB(t *testing.T) {
	for _, tc := range []struct {
		name        string
		totalMiB, n int
		want        int
	}{
		{"H200 by 4", 143771, 4, 35942},
		{"H100 by 3", 81559, 3, 27186},
		{"P40 by 4", 24576, 4, 6144},
		{"whole GPU", 81559, 1, 81559},
		{"Hopper limit", 143771, 48, 2995},
		{"no split", 81559, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := MemoryLimitMiB(tc.totalMiB, tc.n); got != tc.want {
				t.Errorf("MemoryLimitMiB(%d, %d) = %d, want %d", tc.totalMiB, tc.n, got, tc.want)
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
		PCIVendorID: 0x10de, PCIDeviceID: 0x2335, MemoryTotalBytes: 143771 * mib,
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
		want := Device{GPU: g, Index: i, Addr: []string{"af:00.0-0", "af:00.0-1", "af:00.0-2", "af:00.0-3"}[i],
			MemoryLimitMiB: 35942, MemoryTotalMiB: 143771, ThreadPercentage: 25}
		if d != want {
			t.Errorf("device %d: got %+v, want %+v", i, d, want)
		}
	}
	if got := Split(g, 0, 100, QoS{}); got != nil {
		t.Errorf("Split by 0 gave %d devices, want none", len(got))
	}
	if got := Split(g, 1, 100, QoS{}); len(got) != 1 || got[0].Addr != "af:00.0-0" || got[0].MemoryLimitMiB != 143771 {
		t.Errorf("Split by 1 gave %+v, want the whole GPU as af:00.0-0", got)
	}
}

// TestAPI pins the inventory rows: the fields Cloudpods' tools read.
func TestAPI(t *testing.T) {
	p40 := gpu.Info{
		UUID: "GPU-76aef7ff-372d-2432-b4b4-beca4d8d3400", Name: "Tesla P40", PCI: pci.Address{Bus: 0, Device: 6},
		PCIVendorID: 0x10de, PCIDeviceID: 0x1b38, MemoryTotalBytes: 24576 * mib, Architecture: gpu.ArchPascal,
		NUMANode: -1, PCIeGeneration: 3, PCIeWidth: 16,
	}
	noLink := h200(t, "0000:3b:00.0")
	noLink.PCIeGeneration = 0
	var rows []any
	for _, d := range append(Split(p40, 2, 50, QoS{}), Split(noLink, 3, 33, QoS{})[2]) {
		rows = append(rows, d.API("197c1d98-316a-42e6-889d-68497153cc82"))
	}
	got, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "api.golden.json", append(got, '\n'))
}
