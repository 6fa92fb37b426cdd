package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// The cluster the loader fills: hosts of 8 GPUs of one model, each GPU
// split in 4 to 48 MPS slices, a fraction of the slices attached to pods
// of 1 to 4 slices. It is derived from the row count and a seed alone, so a
// later run finds the same hosts and models in a database an earlier run
// filled.

const gpusPerHost = 8

// models are the GPU models of the cluster, with their memory in MiB.
var models = []struct {
	name   string
	memMiB int
}{
	{"NVIDIA H100 80GB HBM3", 81559},
	{"NVIDIA H200", 143771},
	{"NVIDIA A100-SXM4-80GB", 81920},
	{"NVIDIA L40S", 46068},
}

// sliceCounts are the virtual_number values hosts use.
var sliceCounts = []int{4, 8, 12, 16, 24, 32, 48}

// hostShape is one host of the cluster.
type hostShape struct {
	name   string
	model  int // index in models
	slices int // per GPU
	rows   int // devices: gpusPerHost*slices, fewer on the last host
}

// clusterShape lays out rows devices; the same (rows, seed) always gives
// the same hosts.
func clusterShape(rows int, seed uint64) []hostShape {
	r := rand.New(rand.NewPCG(seed, 0x6d7073))
	var hosts []hostShape
	for left := rows; left > 0; {
		h := hostShape{
			name:   fmt.Sprintf("bench-%06d", len(hosts)),
			model:  r.IntN(len(models)),
			slices: sliceCounts[r.IntN(len(sliceCounts))],
		}
		h.rows = min(left, gpusPerHost*h.slices)
		left -= h.rows
		hosts = append(hosts, h)
	}
	return hosts
}

// devices returns host i's device rows; a fraction attached of them (on
// average) are held by pods of 1 to 4 slices.
func (h hostShape) devices(i int, attached float64, seed uint64) []api.IsolatedDevice {
	r := rand.New(rand.NewPCG(seed, uint64(i)))
	// A free slice starts a pod (of 2.5 slices on average) with probability
	// start, which makes the held fraction start*2.5 / (start*2.5 + 1-start).
	const podSlices = 2.5
	start := attached / (podSlices*(1-attached) + attached)
	m := models[h.model]
	out := make([]api.IsolatedDevice, 0, h.rows)
	pod, podLeft := 0, 0
	for n := range h.rows {
		g, s := n/h.slices, n%h.slices
		d := api.IsolatedDevice{
			Name: fmt.Sprintf("mps-%02x:00.0-%d", 0x1a+g, s), HostID: h.name,
			DevType: api.DevTypeNvidiaMPS, Model: m.name,
			Addr: fmt.Sprintf("%02x:00.0-%d", 0x1a+g, s), VendorDeviceID: "10de:2330",
			DevicePath: fmt.Sprintf("GPU-%08x-%04x-0000-0000-000000000000", i, g), NumaNode: g / (gpusPerHost / 2),
			Index: -1, DeviceMinor: g,
		}
		setSliceCaps(&d, m.memMiB, h.slices)
		if podLeft == 0 && r.Float64() < start {
			pod, podLeft = pod+1, 1+r.IntN(4)
		}
		if podLeft > 0 {
			d.GuestID = fmt.Sprintf("pod-%06d-%d", i, pod)
			podLeft--
		}
		out = append(out, d)
	}
	return out
}

// fill creates the cluster in the store: per host, the host and its
// devices (one statement), workers hosts at a time. It prints progress to
// log every few seconds.
func fill(ctx context.Context, st *store.Store, hosts []hostShape, attached float64, seed uint64, workers int, log func(string, ...any)) error {
	var next, done atomic.Int64
	var rows atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	wg.Go(func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				log("fill: %d/%d hosts, %d rows, %.0f rows/s", done.Load(), len(hosts), rows.Load(),
					float64(rows.Load())/time.Since(start).Seconds())
			}
		}
	})
	var workersWG sync.WaitGroup
	for range workers {
		workersWG.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(hosts) || ctx.Err() != nil {
					return
				}
				if err := fillHost(ctx, st, hosts[i], i, attached, seed); err != nil {
					errs <- err
					cancel()
					return
				}
				done.Add(1)
				rows.Add(int64(hosts[i].rows))
			}
		})
	}
	workersWG.Wait()
	cancel()
	wg.Wait()
	close(errs)
	return <-errs
}

func fillHost(ctx context.Context, st *store.Store, h hostShape, i int, attached float64, seed uint64) error {
	if _, err := st.CreateHost(ctx, api.Host{Name: h.name, AccessIP: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)}); err != nil {
		return fmt.Errorf("creating host %s: %w", h.name, err)
	}
	devs := h.devices(i, attached, seed)
	for len(devs) > 0 {
		n := min(len(devs), store.MaxCreateDevices)
		if _, err := st.CreateDevices(ctx, devs[:n]); err != nil {
			return fmt.Errorf("creating the devices of host %s: %w", h.name, err)
		}
		devs = devs[n:]
	}
	return nil
}

// setSliceCaps gives d the MPS caps of one of slices equal slices of a GPU
// of memMiB, as the agent's rows carry them: the one place the bench
// spells the record's MPS fields.
func setSliceCaps(d *api.IsolatedDevice, memMiB, slices int) {
	d.MPSMemoryLimit, d.MPSMemoryTotal, d.MPSThreadPercentage = memMiB/slices, memMiB, 100/slices
}
