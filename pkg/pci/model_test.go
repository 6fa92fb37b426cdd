package pci

import "testing"

func TestModelsAsCloudpodsReadsLspci(t *testing.T) {
	m, err := LoadModels("testdata/pci.ids")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ id, fallback, want string }{
		{"10de:2330", "NVIDIA H100 80GB HBM3", "H100 SXM5 80GB"},
		{"10DE:1B38", "Tesla P40", "Tesla P40"},
		{"10de:2335", "NVIDIA H200", "H200 SXM 141GB"},
		{"10de:9999", "NVIDIA Thing", "NVIDIA Thing"}, // no brackets: nvidia-smi's name
		{"10de:0001", "NVIDIA Unknown", "NVIDIA Unknown"},
	} {
		if got := m.Model(tc.id, tc.fallback); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.id, got, tc.want)
		}
	}
	var none *Models
	if got := none.Model("10de:2330", "NVIDIA H100 80GB HBM3"); got != "NVIDIA H100 80GB HBM3" {
		t.Errorf("no pci.ids: %q", got)
	}
	if _, err := LoadModels("testdata/missing.ids"); err == nil {
		t.Error("a missing pci.ids gave no error")
	}
}
