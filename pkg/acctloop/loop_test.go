package acctloop

import (
	"slices"
	"testing"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
	"yunion.io/x/mps-daemon/pkg/view"
)

// The accounting's station alone: its part of the status from the passes'
// reports, which GPUs it polls, what it writes into the views. The passes
// against real processes are pkg/agent's tests (the station in its row).

const (
	gpuA = gpu.UUID("GPU-0000000a-aaaa-bbbb-cccc-dddddddddddd")
	gpuB = gpu.UUID("GPU-0000000b-aaaa-bbbb-cccc-dddddddddddd")
)

// used is a report of a pass that measured these devices (of their GPU).
func used(policy config.AccountingPolicy, devs map[vdev.Name]units.Bytes) accounting.Report {
	r := accounting.Report{Policy: policy, Usage: accounting.Usage{PerDevice: map[string]accounting.DeviceUsage{}}}
	for n, b := range devs {
		uuid, _, _ := vdev.ParseName(string(n))
		r.Usage.PerDevice[n.String()] = accounting.DeviceUsage{GPU: uuid, UsedBytes: uint64(b), PIDs: []int{1}}
	}
	return r
}

// statusOf is the station's part of a status listing these devices and
// claims.
func statusOf(l *Loop, devs []vdev.Name, claims []vdev.Name) status.Status {
	var st status.Status
	for _, n := range devs {
		st.Devices = append(st.Devices, status.Device{Name: n.String()})
	}
	for _, n := range claims {
		st.Claims = append(st.Claims, status.Claim{Device: status.Device{Name: n.String()}})
	}
	l.Status(&st)
	return st
}

// A tick measures every device; a poll replaces the figures of the GPUs it
// looked at alone (a device of one it did not measure shows unmeasured, not
// idle); the others keep what the last pass of theirs found.
func TestAPollReplacesItsGPUsFiguresAlone(t *testing.T) {
	l := New(Options{})
	a0, a1, b0 := vdev.NameOf(gpuA, 0), vdev.NameOf(gpuA, 1), vdev.NameOf(gpuB, 0)
	l.noteUsage(used(config.AccountingEnforce, map[vdev.Name]units.Bytes{a0: 1 << 30, a1: 2 << 30, b0: 3 << 30}), nil)
	l.noteUsage(used(config.AccountingEnforce, map[vdev.Name]units.Bytes{a0: 5 << 30}), map[gpu.UUID]bool{gpuA: true})
	st := statusOf(l, []vdev.Name{a0, a1, b0}, nil)
	for i, want := range []struct {
		used     units.Bytes
		measured bool
	}{{5 << 30, true}, {0, false}, {3 << 30, true}} {
		if d := st.Devices[i]; d.UsedBytes != want.used || d.Measured != want.measured {
			t.Errorf("%s: %d bytes, measured %v; want %d, %v", d.Name, d.UsedBytes, d.Measured, want.used, want.measured)
		}
	}
	if st.Accounting == nil || st.Accounting.Policy != string(config.AccountingEnforce) {
		t.Errorf("accounting %+v", st.Accounting)
	}
	// Accounting off: nothing measured.
	l.noteUsage(accounting.Report{Policy: config.AccountingOff}, nil)
	for _, d := range statusOf(l, []vdev.Name{a0, b0}, nil).Devices {
		if d.Measured || d.UsedBytes != 0 {
			t.Errorf("accounting off, %s shows %+v", d.Name, d)
		}
	}
}

// A device's figures last while the backend lists it; one gone and back
// starts unmeasured.
func TestKeepForgetsTheDevicesGone(t *testing.T) {
	l := New(Options{})
	a0, a1 := vdev.NameOf(gpuA, 0), vdev.NameOf(gpuA, 1)
	l.noteUsage(used(config.AccountingReport, map[vdev.Name]units.Bytes{a0: 1 << 30, a1: 2 << 30}), nil)
	l.Keep(map[string]bool{a0.String(): true})
	st := statusOf(l, []vdev.Name{a0, a1}, nil)
	if !st.Devices[0].Measured || st.Devices[1].Measured || st.Devices[1].UsedBytes != 0 {
		t.Errorf("after Keep(%s): %+v", a0, st.Devices)
	}
}

// A step the connect path takes shows on the agent's device at once; a
// claim's device shows the steps of its passes, with its escapes.
func TestStepsAndEscapesOfDevicesAndClaims(t *testing.T) {
	l := New(Options{})
	slice, own := vdev.NameOf(gpuA, 0), vdev.NameOf(gpuA, claim.IndexBase)
	connect := accounting.ConnectReport{Report: accounting.Report{Policy: config.AccountingEnforce, Steps: []accounting.Step{
		{Action: accounting.Action{PID: 7, Device: slice.String(), GPU: gpuA, Cause: accounting.CauseLimit}, Step: accounting.StepSIGKILL, First: true},
		{Action: accounting.Action{PID: 8, Device: own.String(), GPU: gpuA, Cause: accounting.CauseLimit}, Step: accounting.StepSIGKILL, First: true},
	}}, Checked: 2}
	l.noteConnected(connect)
	st := statusOf(l, []vdev.Name{slice}, []vdev.Name{own})
	if st.Devices[0].LastStep != accounting.StepSIGKILL || st.Claims[0].LastStep != "" {
		t.Errorf("after the connect path: device step %q, claim step %q", st.Devices[0].LastStep, st.Claims[0].LastStep)
	}
	if nc := st.Accounting.NewClients; nc == nil || nc.Checked != 2 || len(st.Accounting.Terminations) != 2 {
		t.Errorf("accounting after the connect path: %+v", st.Accounting)
	}
	pass := used(config.AccountingEnforce, map[vdev.Name]units.Bytes{slice: 1, own: 2})
	pass.Steps = []accounting.Step{{Action: accounting.Action{PID: 9, Device: own.String(), GPU: gpuA, Cause: accounting.CauseQoS}, Step: accounting.StepTerminateClient}}
	pass.Usage.Escapes = []accounting.Escape{{}}
	pass.Usage.Escapes[0].Device, pass.Usage.Escapes[0].GPU = own.String(), gpuA
	l.noteUsage(pass, nil)
	st = statusOf(l, []vdev.Name{slice}, []vdev.Name{own})
	if c := st.Claims[0]; c.LastStep != accounting.StepTerminateClient || c.Escapes != 1 || c.UsedBytes != 2 {
		t.Errorf("the claim after a pass: %+v", c)
	}
	if d := st.Devices[0]; d.LastStep != accounting.StepSIGKILL || d.UsedBytes != 1 {
		t.Errorf("the device after a pass: %+v", d)
	}
}

// A poll looks at the GPUs with clients and those whose control log is
// not followed; the same clients with the same memory are the same poll.
func TestPolledGPUs(t *testing.T) {
	in := Inputs{GPUs: []gpu.UUID{gpuA, gpuB}, Logs: map[string][]gpu.UUID{"/a/control.log": {gpuA}, "/b/control.log": {gpuB}}}
	following := map[string]mps.ClientLogState{"/a/control.log": {Following: true}, "/b/control.log": {Following: true}}
	if got := polled(in, map[gpu.UUID]bool{gpuB: true}, following); !slices.Equal(got, []gpu.UUID{gpuB}) {
		t.Errorf("polled %v, want the GPU with clients", got)
	}
	lost := map[string]mps.ClientLogState{"/a/control.log": {Following: false}, "/b/control.log": {Following: true}}
	if got := polled(in, nil, lost); !slices.Equal(got, []gpu.UUID{gpuA}) {
		t.Errorf("polled %v, want the GPU whose log is not followed", got)
	}
	procs := map[gpu.UUID][]gpu.Process{gpuA: {{PID: 1, UsedMemoryBytes: 10}}}
	if !samePolled(procs, procs, []gpu.UUID{gpuA}) {
		t.Error("the same clients taken for new ones")
	}
	if samePolled(procs, map[gpu.UUID][]gpu.Process{gpuA: {{PID: 1, UsedMemoryBytes: 11}}}, []gpu.UUID{gpuA}) {
		t.Error("a client's new memory taken for the same poll")
	}
}

// Each pass writes the devices' use into their views while
// mps_view_library is set; accounting off, 0.
func TestViewsGetTheUse(t *testing.T) {
	w := view.NewWriter(view.Store{Dir: t.TempDir()}, t.TempDir())
	a0 := vdev.NameOf(gpuA, 0)
	if _, err := w.Sync(func(vdev.Name) bool { return true }, []view.Device{{Name: a0, Cap: 1024}}); err != nil {
		t.Fatal(err)
	}
	l := New(Options{Views: w})
	usedOf := func() units.Bytes { return w.Views()[a0].Used }
	l.WriteViewUsage(Inputs{}, used(config.AccountingReport, map[vdev.Name]units.Bytes{a0: 7}))
	if got := usedOf(); got != 0 {
		t.Errorf("mps_view_library unset, the view says %d used", got)
	}
	l.WriteViewUsage(Inputs{ViewConfigured: true}, used(config.AccountingReport, map[vdev.Name]units.Bytes{a0: 7}))
	if got := usedOf(); got != 7 {
		t.Errorf("the view says %d used, want 7", got)
	}
	l.WriteViewUsage(Inputs{ViewConfigured: true}, accounting.Report{Policy: config.AccountingOff})
	if got := usedOf(); got != 0 {
		t.Errorf("accounting off, the view says %d used", got)
	}
}
