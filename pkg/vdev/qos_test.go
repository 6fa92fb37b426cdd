package vdev

import (
	"testing"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/pci"
	"yunion.io/x/mps-daemon/pkg/units"
)

func TestBatchShare(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		p, n, latency, reserve, want int
	}{
		// The probe's settings on an H100 (docs/gpu-runs/qos-probe.md).
		{"N=8 auto, 1 latency, reserve 8", 50, 8, 1, 8, 13}, // 7 x 13 = 91: 16 SMs each
		{"N=8 auto, reserve 4", 50, 8, 1, 4, 13},            // 96/7 = 13 too
		{"N=8 auto, reserve 12", 50, 8, 1, 12, 12},          // 88/7 = 12: 14 SMs
		{"N=4 auto (no cap), reserve 8", 100, 4, 1, 8, 30},  // 3 x 30 = 90
		{"N=4 auto (no cap), reserve 4", 100, 4, 1, 4, 32},  // 3 x 32 = 96: 42 SMs each
		{"one batch slice takes all but the reserve", 100, 4, 3, 4, 96},
		{"never above the policy's share", 12, 8, 1, 8, 12}, // even: 100/8 = 12 < 13
		{"two latency slices", 50, 8, 2, 8, 15},             // 92/6
		{"at least 1: MPS refuses 0", 2, 48, 1, 50, 1},      // 50/47 = 1
		{"reserve 50, many batch", 100, 48, 1, 50, 1},
		{"no batch slice", 50, 8, 8, 8, 50},
		{"N=2", 100, 2, 1, 8, 92},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := BatchShare(tc.p, tc.n, tc.latency, tc.reserve); got != tc.want {
				t.Errorf("BatchShare(%d, %d, %d, %d) = %d, want %d", tc.p, tc.n, tc.latency, tc.reserve, got, tc.want)
			}
		})
	}
}

func TestLatencyShare(t *testing.T) {
	for _, tc := range []struct{ p, n, want int }{
		{50, 8, 12}, {100, 4, 25}, {100, 2, 50}, {100, 1, 100}, {12, 8, 12}, {10, 8, 10}, {100, 48, 2}, {100, 200, 1}, {7, 0, 7},
	} {
		if got := LatencyShare(tc.p, tc.n); got != tc.want {
			t.Errorf("LatencyShare(%d, %d) = %d, want %d", tc.p, tc.n, got, tc.want)
		}
	}
}

func TestSplitQoS(t *testing.T) {
	const h100 units.MiB = 81559 // an H100's memory.total
	g := gpu.Info{UUID: "GPU-1", PCI: pci.Address{Bus: 0x1a}, MemoryTotal: h100.Bytes()}
	// The shares auto (400/N) and even (100/N) give N devices.
	auto := func(n int) int { return min(100, 400/n) }
	even := func(n int) int { return 100 / n }
	type dev struct {
		threads int
		class   Class
	}
	L, B, S := ClassLatency, ClassBatch, ClassShared
	for _, tc := range []struct {
		name     string
		n        int
		policy   func(n int) int
		q        QoS
		want     []dev
		defaults ServerDefaults
	}{
		{"no QoS: as today", 4, auto, QoS{}, []dev{{100, S}, {100, S}, {100, S}, {100, S}}, ServerDefaults{100, 0}},
		{"slice 0 latency, N=8", 8, auto, QoS{LatencySlices: []int{0}, ReservePercent: 8},
			[]dev{{12, L}, {13, B}, {13, B}, {13, B}, {13, B}, {13, B}, {13, B}, {13, B}}, ServerDefaults{13, 1}},
		{"slice 0 latency, N=8, reserve 4", 8, auto, QoS{LatencySlices: []int{0}, ReservePercent: 4},
			[]dev{{12, L}, {13, B}, {13, B}, {13, B}, {13, B}, {13, B}, {13, B}, {13, B}}, ServerDefaults{13, 1}},
		{"slice 2 latency, N=4", 4, auto, QoS{LatencySlices: []int{2}, ReservePercent: 8},
			[]dev{{30, B}, {30, B}, {25, L}, {30, B}}, ServerDefaults{30, 1}},
		{"slice 0 latency, N=4, reserve 4", 4, auto, QoS{LatencySlices: []int{0}, ReservePercent: 4},
			[]dev{{25, L}, {32, B}, {32, B}, {32, B}}, ServerDefaults{32, 1}},
		{"a large reserve: the latency share is the largest", 8, auto, QoS{LatencySlices: []int{0}, ReservePercent: 35},
			[]dev{{12, L}, {9, B}, {9, B}, {9, B}, {9, B}, {9, B}, {9, B}, {9, B}}, ServerDefaults{12, 1}},
		{"even: batch share capped at the policy's", 8, even, QoS{LatencySlices: []int{0}, ReservePercent: 8},
			[]dev{{12, L}, {12, B}, {12, B}, {12, B}, {12, B}, {12, B}, {12, B}, {12, B}}, ServerDefaults{12, 1}},
		{"every slice latency: as none", 2, auto, QoS{LatencySlices: []int{0, 1}, ReservePercent: 8}, []dev{{100, S}, {100, S}}, ServerDefaults{100, 0}},
		{"empty list: as none", 2, auto, QoS{ReservePercent: 8}, []dev{{100, S}, {100, S}}, ServerDefaults{100, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			devs := Split(g, tc.n, tc.policy(tc.n), tc.q)
			if len(devs) != len(tc.want) {
				t.Fatalf("%d devices, want %d", len(devs), len(tc.want))
			}
			for i, d := range devs {
				if (dev{d.ThreadPercentage, d.Class}) != tc.want[i] || d.MemoryLimit != h100/units.MiB(tc.n) || d.Index != i {
					t.Errorf("slice %d: %d%% %q %v, want %d%% %q and memory total/N", i, d.ThreadPercentage, d.Class, d.MemoryLimit, tc.want[i].threads, tc.want[i].class)
				}
				if want := tc.want[i].class == B; (d.Class.ClientPriority() == PriorityBelowNormal) != want {
					t.Errorf("slice %d: priority %d", i, d.Class.ClientPriority())
				}
			}
			if got := DefaultsOf(devs); got != tc.defaults {
				t.Errorf("server defaults %+v, want %+v", got, tc.defaults)
			}
		})
	}
}

func TestMostProtective(t *testing.T) {
	got := MostProtective(ServerDefaults{50, 1}, ServerDefaults{100, 0}, ServerDefaults{25, 0})
	if got != (ServerDefaults{100, 1}) {
		t.Errorf("got %+v: one daemon for all GPUs takes the largest share and below normal priority when any GPU has batch devices", got)
	}
	if got := MostProtective(); got != (ServerDefaults{}) {
		t.Errorf("no GPU: %+v", got)
	}
}

func TestQoSDescribe(t *testing.T) {
	auto := func(n int) int { return min(100, 400/n) }
	for _, tc := range []struct {
		q    QoS
		n    int
		want string
	}{
		{QoS{}, 8, "-"},
		{QoS{LatencySlices: []int{0}, ReservePercent: 8}, 8, "latency [0] at 12%; 7 batch at 13%, priority 1"},
		{QoS{LatencySlices: []int{1, 3}, ReservePercent: 8}, 4, "latency [1 3] at 25%; 2 batch at 46%, priority 1"},
		{QoS{LatencySlices: []int{0, 1}, ReservePercent: 8}, 2, "every slice latency: as without mps_qos"},
	} {
		if got := tc.q.Describe(tc.n, auto(tc.n)); got != tc.want {
			t.Errorf("%+v N=%d: %q, want %q", tc.q, tc.n, got, tc.want)
		}
	}
}
