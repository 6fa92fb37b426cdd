package plan

import (
	"slices"
	"testing"

	"yunion.io/x/mps-daemon/pkg/vdev"
)

// An entry's mps_qos reaches its GPU's devices and its control daemon's
// defaults; the other GPUs stay as they were.
func TestBuildQoS(t *testing.T) {
	gpus, r := host(t)
	df := devices(t, "devices:\n"+
		entry("/dev/dri/renderD128", 8)+"  mps_qos:\n    latency: [0]\n"+ // H200, N=8
		entry("/dev/dri/renderD130", 4)+"  mps_qos: {latency: [3], reserve: 4}\n"+ // H100, N=4
		entry("/dev/dri/renderD129", 2)) // P40, no QoS
	p, err := Build(hostConf(t, "enable_cuda_mps: true\nmps_thread_percentage: auto\n"), df, gpus, r)
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		threads  []int
		classes  []vdev.Class
		defaults vdev.ServerDefaults
	}
	L, B, S := vdev.ClassLatency, vdev.ClassBatch, vdev.ClassShared
	wants := map[string]want{
		// auto at N=8 is 50%; the latency slice gets the even share, 12%;
		// 7 batch slices share 92%: 13% each, the control daemon's default.
		"0000:18:00.0": {[]int{12, 13, 13, 13, 13, 13, 13, 13}, []vdev.Class{L, B, B, B, B, B, B, B}, vdev.ServerDefaults{ThreadPercentage: 13, ClientPriority: 1}},
		"0000:3b:00.0": {[]int{100, 100}, []vdev.Class{S, S}, vdev.ServerDefaults{ThreadPercentage: 100, ClientPriority: 0}},
		// auto at N=4 is no cap; the latency slice gets 25%, 3 batch
		// slices share 96%: 32% each.
		"0000:af:00.0": {[]int{32, 32, 32, 25}, []vdev.Class{B, B, B, L}, vdev.ServerDefaults{ThreadPercentage: 32, ClientPriority: 1}},
	}
	for _, g := range p.GPUs {
		w := wants[g.GPU.PCI.String()]
		var threads []int
		var classes []vdev.Class
		for _, d := range g.Devices {
			threads, classes = append(threads, d.ThreadPercentage), append(classes, d.Class)
		}
		if !slices.Equal(threads, w.threads) || !slices.Equal(classes, w.classes) || g.Defaults() != w.defaults {
			t.Errorf("%s: shares %v classes %v defaults %+v; want %v %v %+v", g.GPU.PCI, threads, classes, g.Defaults(), w.threads, w.classes, w.defaults)
		}
	}
	if got := p.SharedDefaults(); got != (vdev.ServerDefaults{ThreadPercentage: 100, ClientPriority: 1}) {
		t.Errorf("one daemon for these GPUs: %+v, want the largest share and below normal priority", got)
	}
}
