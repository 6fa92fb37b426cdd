package agent

import (
	"encoding/json"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/golden"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/pci"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// TestRowOf pins the inventory rows: the fields Cloudpods' tools read.
func TestRowOf(t *testing.T) {
	const p40Memory units.MiB = 24576
	p40 := gpu.Info{
		UUID: "GPU-76aef7ff-372d-2432-b4b4-beca4d8d3400", Name: "Tesla P40", PCI: pci.Address{Bus: 0, Device: 6},
		PCIVendorID: 0x10de, PCIDeviceID: 0x1b38, MemoryTotal: p40Memory.Bytes(), Architecture: gpu.ArchPascal,
		NUMANode: -1, PCIeGeneration: 3, PCIeWidth: 16,
	}
	noLink := twoGPUs()[0]
	noLink.PCI, noLink.NUMANode, noLink.PCIeGeneration = pci.Address{Bus: 0x3b}, 1, 0
	var rows []any
	for _, d := range append(vdev.Split(p40, 2, 50, vdev.QoS{}), vdev.Split(noLink, 3, 33, vdev.QoS{})[2]) {
		r := rowOf(d, d.Index != 2)
		r.HostID = "197c1d98-316a-42e6-889d-68497153cc82" // the backend's to fill (backend.Rows)
		rows = append(rows, r)
	}
	got, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "rows.golden.json", append(got, '\n'))
}
