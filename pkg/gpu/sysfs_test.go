package gpu

import (
	"os"
	"path/filepath"
	"testing"

	"yunion.io/x/mps-daemon/pkg/pci"
)

func TestNUMANode(t *testing.T) {
	sys := t.TempDir()
	for addr, content := range map[string]string{
		"0000:1a:00.0": "1\n",
		"0000:3b:00.0": "-1\n",
		"0000:5e:00.0": "garbage\n",
		"0000:af:00.0": "",
	} {
		dir := filepath.Join(sys, "bus", "pci", "devices", addr)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		addr string
		want int
	}{
		{"00000000:1A:00.0", 1}, // NVML's spelling finds sysfs' directory
		{"3b:00.0", -1},
		{"0000:5e:00.0", -1},
		{"0000:af:00.0", -1},
		{"0000:d8:00.0", -1}, // no such device
	} {
		t.Run(tc.addr, func(t *testing.T) {
			a, err := pci.Parse(tc.addr)
			if err != nil {
				t.Fatal(err)
			}
			if got := NUMANode(sys, a); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}

	gpus := []Info{{PCI: mustParse(t, "1a:00.0"), NUMANode: 7}, {PCI: mustParse(t, "d8:00.0"), NUMANode: 7}}
	FillNUMA(sys, gpus)
	if gpus[0].NUMANode != 1 || gpus[1].NUMANode != -1 {
		t.Errorf("FillNUMA gave %d and %d, want 1 and -1", gpus[0].NUMANode, gpus[1].NUMANode)
	}
}

func mustParse(t *testing.T, s string) pci.Address {
	t.Helper()
	a, err := pci.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
