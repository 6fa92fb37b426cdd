package acctloop

import (
	"testing"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/pod"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
	"yunion.io/x/mps-daemon/pkg/view"
)

// slice is slice i of GPU g, of cap MiB.
func slice(g gpu.UUID, i int, cap units.MiB) vdev.Device {
	return vdev.Device{GPU: gpu.Info{UUID: g}, Index: i, MemoryLimit: cap}
}

// A Cloudpods pod's cap on a GPU is what its server holds there, summed,
// on the GPUs with enforced caps alone; its first slice is the one of the
// lowest index; without pods looked for (Held nil) there are none.
func TestPodsCapIsWhatTheirServersHold(t *testing.T) {
	in := Inputs{GPUs: []gpu.UUID{gpuA}, Held: []Held{
		{Device: slice(gpuA, 3, 1024), Holder: "srv-1"},
		{Device: slice(gpuA, 1, 2048), Holder: "srv-1"},
		{Device: slice(gpuA, 2, 1024), Holder: "srv-2"},
		{Device: slice(gpuB, 0, 4096), Holder: "srv-1"}, // a GPU without enforced caps
		{Device: slice(gpuA, 0, 1024)},                  // free
	}}
	in.settle()
	caps, _ := in.scope()
	p1, p2 := accounting.PodName(gpuA, "srv-1"), accounting.PodName(gpuA, "srv-2")
	if caps[p1] != uint64(units.MiB(3072).Bytes()) || caps[p2] != uint64(units.MiB(1024).Bytes()) || len(in.pods) != 2 {
		t.Errorf("caps %v, pods %+v", caps, in.pods)
	}
	if h := in.pods[p1]; h.first != 1 || h.slices != 2 {
		t.Errorf("srv-1's holding %+v: want its 2 slices, the first index 1", h)
	}
	none := Inputs{GPUs: []gpu.UUID{gpuA}}
	none.settle()
	if caps, _ := none.scope(); len(none.pods) != 0 || len(caps) != 0 {
		t.Errorf("no pods looked for: caps %v, pods %v", caps, none.pods)
	}
}

// A pod's use shows in the status with its server, its GPU's index as
// the status lists it, its slices and cap; a poll of another GPU keeps
// it, accounting off clears it; its use is written into its first
// slice's view too (the view its containers get through NRI).
func TestPodsInTheStatusAndTheirView(t *testing.T) {
	w := view.NewWriter(view.Store{Dir: t.TempDir()}, t.TempDir())
	first := vdev.NameOf(gpuA, 1)
	if _, err := w.Sync(func(vdev.Name) bool { return true }, []view.Device{{Name: first, Cap: 2048}}); err != nil {
		t.Fatal(err)
	}
	l := New(Options{Views: w})
	in := Inputs{GPUs: []gpu.UUID{gpuA}, ViewConfigured: true, Held: []Held{{Device: slice(gpuA, 1, 2048), Holder: "srv-1"}, {Device: slice(gpuA, 2, 2048), Holder: "srv-1"}}}
	in.settle()
	name := accounting.PodName(gpuA, "srv-1")
	r := accounting.Report{Policy: config.AccountingEnforce, Usage: accounting.Usage{PerDevice: map[string]accounting.DeviceUsage{
		name: {GPU: gpuA, UsedBytes: 5 << 20, PIDs: []int{7, 8}, Clients: []accounting.Client{{PID: 7, Pod: pod.Pod{Server: "srv-1", Name: "web"}}, {PID: 8}}},
	}}, Decision: accounting.Decision{Over: []accounting.Overage{{Device: name}}}}
	l.notePods(r, nil, in.pods)
	l.writeViewUsage(in, in.withPodViews(r))
	st := status.Status{GPUs: []status.GPU{{UUID: string(gpuB), Index: 0}, {UUID: string(gpuA), Index: 1}}}
	l.Status(&st)
	want := status.Pod{Name: name, Server: "srv-1", ServerName: "web", GPU: string(gpuA), GPUIndex: 1, Slices: 2,
		MemoryLimit: units.MiB(4096).Bytes(), UsedBytes: 5 << 20, Clients: 2, OverCap: true}
	if len(st.Pods) != 1 || st.Pods[0] != want {
		t.Errorf("pods %+v\nwant %+v", st.Pods, want)
	}
	if got := w.Views()[first].Used; got != 5<<20 {
		t.Errorf("the pod's first slice's view says %d used, want the pod's %d", got, 5<<20)
	}
	l.notePods(accounting.Report{Policy: config.AccountingEnforce, Usage: accounting.Usage{PerDevice: map[string]accounting.DeviceUsage{}}}, map[gpu.UUID]bool{gpuB: true}, nil)
	st = status.Status{}
	l.Status(&st)
	if len(st.Pods) != 1 || st.Pods[0].GPUIndex != -1 {
		t.Errorf("after a poll of another GPU: %+v (its GPU not listed: index -1)", st.Pods)
	}
	l.notePods(accounting.Report{Policy: config.AccountingOff}, nil, nil)
	st = status.Status{}
	l.Status(&st)
	if len(st.Pods) != 0 {
		t.Errorf("accounting off, pods %+v", st.Pods)
	}
}
