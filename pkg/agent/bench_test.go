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
// with a real inventory over loopback HTTP and SQLite.
//
//	go test -run '^$' -bench EditToInventory ./pkg/agent
func BenchmarkEditToInventory(b *testing.B) {
	h := newHarness(b, "", fourAndTwo)
	h.writeConfig(b, fourAndTwo)
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
	waitCount(6)
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		n0 := 5 + i%2 // alternate 5 and 6 slices on GPU 0
		start := time.Now()
		writeAtomic(b, cfg.Host.ContainerDeviceConfigFile, yamlFor(n0, 2))
		waitCount(n0 + 2)
		took = append(took, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(took[len(took)-1])/1e6, "max-ms")
}
