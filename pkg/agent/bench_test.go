package agent

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkEditToInventory measures what an operator waits for: from saving
// the device YAML (atomically, as editors do) to the inventory holding the
// new devices, through fsnotify, validation, MPS (simulated) and the sync
// with a real inventory over loopback HTTP and SQLite. GPU 0 of two is
// resized, 5 and 6 slices in turn.
//
//	go test -run '^$' -bench EditToInventory ./pkg/agent
func BenchmarkEditToInventory(b *testing.B) {
	h := newHarness(b, "", fourAndTwo)
	editToInventory(b, h, fourAndTwo, 6, func(i int) (string, int) {
		n0 := 5 + i%2
		return yamlFor(n0, 2), n0 + 2
	})
}

// BenchmarkEditOneOfEightGPUs is the same on the simulated 8 x H100 host
// (the --simulate host), GPU 3 resized: what a reconcile of one GPU's edit
// costs beside seven GPUs it leaves alone.
//
//	go test -run '^$' -bench EditOneOfEightGPUs ./pkg/agent
func BenchmarkEditOneOfEightGPUs(b *testing.B) {
	all := [8]int{4, 4, 4, 4, 4, 4, 4, 4}
	h := newHarness(b, "", eightGPUs(all))
	h.onSimulatedHost(b, "8xH100")
	editToInventory(b, h, eightGPUs(all), 32, func(i int) (string, int) {
		n := all
		n[3] = 5 + i%2
		return eightGPUs(n), 28 + n[3]
	})
}

// editToInventory runs h's agent on its files (the device YAML first, of
// devices virtual devices) and times each edit i, the YAML and device count
// edit(i) gives,
// from the save to the inventory holding that many devices; it reports the
// median (p50-ms) and the slowest (max-ms).
func editToInventory(b *testing.B, h *harness, first string, devices int, edit func(i int) (string, int)) {
	h.writeConfig(b, first)
	cfg, err := LoadConfig(h.agent.opts.ConfigPath)
	if err != nil {
		b.Fatal(err)
	}
	h.agent.cfg = cfg
	h.agent.opts.WatchFiles = true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.agent.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitCount := func(n int) {
		deadline := time.Now().Add(10 * time.Second)
		for len(h.devices()) != n {
			if time.Now().After(deadline) {
				b.Fatalf("inventory never reached %d devices", n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitCount(devices)
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		yaml, want := edit(i)
		start := time.Now()
		writeAtomic(b, cfg.Host.ContainerDeviceConfigFile, yaml)
		waitCount(want)
		took = append(took, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(took[len(took)-1])/1e6, "max-ms")
}
