package accounting

import (
	"reflect"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/clientreport"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/units"
)

const gib = uint64(1) << 30

// dev builds one device's usage from clients given as (pid, start, GiB).
func dev(gpuUUID gpu.UUID, clients ...[3]uint64) DeviceUsage {
	d := DeviceUsage{GPU: gpuUUID, PIDs: []int{}}
	for _, c := range clients {
		cl := Client{PID: int(c[0]), StartTicks: c[1], UsedBytes: c[2] * gib}
		d.Clients = append(d.Clients, cl)
		d.PIDs = append(d.PIDs, cl.PID)
		d.UsedBytes += cl.UsedBytes
	}
	return d
}

func TestDecide(t *testing.T) {
	a0, a1, b0 := gpuA+"::0", gpuA+"::1", gpuB+"::0"
	caps := map[string]uint64{a0: 8 * gib, a1: 8 * gib, b0: 4 * gib}
	usage := func(devs map[string]DeviceUsage, unknown ...UnknownProcess) Usage {
		return Usage{PerDevice: devs, Unknown: unknown}
	}
	for _, tc := range []struct {
		name     string
		policy   config.AccountingPolicy
		usage    Usage
		history  History
		over     []string // devices reported over
		picks    []int    // PIDs to terminate, in order
		inReason string   // in the first action's reason
	}{
		{name: "off does nothing", policy: config.AccountingOff,
			usage: usage(map[string]DeviceUsage{a0: dev(gpuA, [3]uint64{1, 1, 20})})},
		{name: "report lists the device, touches nobody", policy: config.AccountingReport,
			usage: usage(map[string]DeviceUsage{a0: dev(gpuA, [3]uint64{1, 1, 9})}), over: []string{a0}},
		{name: "one process over the cap (after a resize) is the one", policy: config.AccountingEnforce,
			usage: usage(map[string]DeviceUsage{a0: dev(gpuA, [3]uint64{7, 1, 9})}),
			over:  []string{a0}, picks: []int{7}, inReason: "no earlier sample"},
		{name: "no earlier sample: the newer of two is picked", policy: config.AccountingEnforce,
			usage: usage(map[string]DeviceUsage{a0: dev(gpuA, [3]uint64{10, 100, 5}, [3]uint64{11, 200, 4})}),
			over:  []string{a0}, picks: []int{11}},
		{name: "the newer pushed it over: it grew from nothing", policy: config.AccountingEnforce,
			usage:   usage(map[string]DeviceUsage{a0: dev(gpuA, [3]uint64{10, 100, 5}, [3]uint64{11, 200, 4})}),
			history: History{Previous: &Usage{PerDevice: map[string]DeviceUsage{a0: dev(gpuA, [3]uint64{10, 100, 5})}}},
			over:    []string{a0}, picks: []int{11}, inReason: "grew +4096 MiB"},
		{name: "the older grew most: it is picked, not the newer", policy: config.AccountingEnforce,
			usage: usage(map[string]DeviceUsage{a0: dev(gpuA, [3]uint64{10, 100, 6}, [3]uint64{11, 200, 3})}),
			history: History{Previous: &Usage{PerDevice: map[string]DeviceUsage{
				a0: dev(gpuA, [3]uint64{10, 100, 2}, [3]uint64{11, 200, 3})}}},
			over: []string{a0}, picks: []int{10}, inReason: "grew +4096 MiB"},
		{name: "equal growth: the newest", policy: config.AccountingEnforce,
			usage: usage(map[string]DeviceUsage{a0: dev(gpuA, [3]uint64{10, 300, 5}, [3]uint64{11, 200, 5})}),
			history: History{Previous: &Usage{PerDevice: map[string]DeviceUsage{
				a0: dev(gpuA, [3]uint64{10, 300, 3}, [3]uint64{11, 200, 3})}}},
			over: []string{a0}, picks: []int{10}},
		{name: "a reused PID is a new process that grew from nothing", policy: config.AccountingEnforce,
			usage: usage(map[string]DeviceUsage{a0: dev(gpuA, [3]uint64{10, 100, 3}, [3]uint64{11, 900, 6})}),
			history: History{Previous: &Usage{PerDevice: map[string]DeviceUsage{
				a0: dev(gpuA, [3]uint64{10, 100, 1}, [3]uint64{11, 200, 6})}}},
			over: []string{a0}, picks: []int{11}},
		{name: "exactly at the cap is fine", policy: config.AccountingEnforce,
			usage: usage(map[string]DeviceUsage{a0: dev(gpuA, [3]uint64{10, 100, 4}, [3]uint64{11, 200, 4})})},
		{name: "as many as needed, recomputed after each pick", policy: config.AccountingEnforce,
			usage: usage(map[string]DeviceUsage{b0: dev(gpuB, [3]uint64{1, 100, 4}, [3]uint64{2, 200, 3}, [3]uint64{3, 300, 3})}),
			over:  []string{b0}, picks: []int{3, 2}},
		{name: "one pick is enough when it frees enough", policy: config.AccountingEnforce,
			usage: usage(map[string]DeviceUsage{a0: dev(gpuA, [3]uint64{1, 100, 4}, [3]uint64{2, 200, 2}, [3]uint64{3, 300, 3})}),
			over:  []string{a0}, picks: []int{3}},
		{name: "only the device over its cap; the others' clients are untouched", policy: config.AccountingEnforce,
			usage: usage(map[string]DeviceUsage{
				a0: dev(gpuA, [3]uint64{10, 100, 7}),
				a1: dev(gpuA, [3]uint64{20, 900, 5}, [3]uint64{21, 901, 4}),
				b0: dev(gpuB, [3]uint64{30, 999, 4})}),
			over: []string{a1}, picks: []int{21}},
		{name: "unknown processes are reported, never picked", policy: config.AccountingEnforce,
			usage: usage(map[string]DeviceUsage{a0: dev(gpuA, [3]uint64{10, 100, 7})},
				UnknownProcess{Unknown: clientreport.Unknown{PID: 66, GPU: gpuA, UsedBytes: units.Bytes(100 * gib), Reason: "names no virtual device"}})},
		{name: "a client being terminated counts as leaving", policy: config.AccountingEnforce,
			usage:   usage(map[string]DeviceUsage{a0: dev(gpuA, [3]uint64{10, 100, 5}, [3]uint64{11, 200, 4})}),
			history: History{Terminating: map[int]bool{11: true}},
			over:    []string{a0}},
		{name: "still over without the one being terminated: the next", policy: config.AccountingEnforce,
			usage:   usage(map[string]DeviceUsage{b0: dev(gpuB, [3]uint64{1, 100, 4}, [3]uint64{2, 200, 3}, [3]uint64{3, 300, 3})}),
			history: History{Terminating: map[int]bool{3: true}},
			over:    []string{b0}, picks: []int{2}},
		{name: "a device without a cap is not judged", policy: config.AccountingEnforce,
			usage: usage(map[string]DeviceUsage{gpuB + "::7": dev(gpuB, [3]uint64{1, 1, 50})})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.usage, caps, tc.policy, tc.history)
			var over []string
			for _, o := range d.Over {
				over = append(over, o.Device)
				if o.UsedBytes <= o.CapBytes || o.CapBytes != caps[o.Device] {
					t.Errorf("overage %+v: used must exceed the device's cap", o)
				}
			}
			var picks []int
			for _, a := range d.Actions {
				picks = append(picks, a.PID)
				du := tc.usage.PerDevice[a.Device]
				if a.DeviceUsedBytes != du.UsedBytes || a.CapBytes != caps[a.Device] || a.GPU != du.GPU {
					t.Errorf("action %+v does not carry its device's figures", a)
				}
			}
			if !reflect.DeepEqual(over, tc.over) {
				t.Errorf("over = %v, want %v", over, tc.over)
			}
			if !reflect.DeepEqual(picks, tc.picks) {
				t.Errorf("picks = %v, want %v", picks, tc.picks)
			}
			if tc.inReason != "" && (len(d.Actions) == 0 || !strings.Contains(d.Actions[0].Reason, tc.inReason)) {
				t.Errorf("actions %+v: want the first reason to mention %q", d.Actions, tc.inReason)
			}
		})
	}
}
