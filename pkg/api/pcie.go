package api

import "fmt"

// link describes one PCIe generation: the transfer rate per lane as Cloudpods
// writes it, and the usable throughput per lane in GB/s after line encoding
// (8b/10b for 1.0 and 2.0, 128b/130b for 3.0 to 5.0, FLIT for 6.0 and 7.0).
type link struct {
	rate      string
	gbPerLane float64
}

var generations = map[int]link{
	1: {"2.5GT/s", 0.25},
	2: {"5GT/s", 0.5},
	3: {"8GT/s", 0.985},
	4: {"16GT/s", 1.969},
	5: {"32GT/s", 3.938},
	6: {"64GT/s", 7.563},
	7: {"128GT/s", 15.125},
}

// PCIEInfoOf turns a PCIe generation and lane width (as NVML reports the
// maximum link) into Cloudpods' pcie_info. It returns nil when the generation
// is unknown or the width is not positive, so the field is left out rather
// than filled with a wrong figure.
func PCIEInfoOf(generation, width int) *PCIEInfo {
	g, ok := generations[generation]
	if !ok || width <= 0 {
		return nil
	}
	return &PCIEInfo{
		LaneWidth:           width,
		Throughput:          fmt.Sprintf("%.2f GB/s", g.gbPerLane*float64(width)),
		TransferRatePerLane: g.rate,
		Version:             fmt.Sprintf("%d.0", generation),
	}
}
