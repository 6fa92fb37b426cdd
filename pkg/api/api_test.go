package api

import (
	"encoding/json"
	"testing"
)

func TestPCIEInfoMatchesCloudpods(t *testing.T) {
	cases := []struct {
		gen, width int
		want       string
	}{
		// The exact object of the Cloudpods documentation for a Tesla P40.
		{3, 16, `{"lane_width":16,"throughput":"15.76 GB/s","transfer_rate_per_lane":"8GT/s","version":"3.0"}`},
		{1, 16, `{"lane_width":16,"throughput":"4.00 GB/s","transfer_rate_per_lane":"2.5GT/s","version":"1.0"}`},
		{4, 4, `{"lane_width":4,"throughput":"7.88 GB/s","transfer_rate_per_lane":"16GT/s","version":"4.0"}`},
		{5, 16, `{"lane_width":16,"throughput":"63.01 GB/s","transfer_rate_per_lane":"32GT/s","version":"5.0"}`},
	}
	for _, c := range cases {
		b, err := json.Marshal(PCIEInfoOf(c.gen, c.width))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.want {
			t.Errorf("PCIEInfoOf(%d, %d) = %s, want %s", c.gen, c.width, b, c.want)
		}
	}
	if PCIEInfoOf(0, 16) != nil || PCIEInfoOf(3, 0) != nil {
		t.Error("unknown generation or width must give no pcie_info")
	}
}

func TestSliceAddr(t *testing.T) {
	for _, i := range []int{0, 3, 47} {
		addr := SliceAddr("1a:00.0", i)
		if gpu, got, ok := ParseSliceAddr(addr); !ok || gpu != "1a:00.0" || got != i {
			t.Errorf("ParseSliceAddr(%q) = %q, %d, %v", addr, gpu, got, ok)
		}
	}
	for _, bad := range []string{"1a:00.0", "-3", "1a:00.0-", "1a:00.0-x", "1a:00.0-03"} {
		if _, _, ok := ParseSliceAddr(bad); ok {
			t.Errorf("ParseSliceAddr(%q) accepted", bad)
		}
	}
}
