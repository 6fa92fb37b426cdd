package acctloop

import (
	"context"
	"maps"
	"slices"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
	"yunion.io/x/mps-daemon/pkg/view"
)

// Pass runs one pass over every GPU of in, in the caller's goroutine (a
// test's; the daemon's passes run in Run).
func (l *Loop) Pass(ctx context.Context, in Inputs) {
	in.settle()
	l.pass(ctx, in, nil)
}

// WriteViewUsage puts each device's use, as a pass measured it (r), in its
// view, as every pass does.
func (l *Loop) WriteViewUsage(in Inputs, r accounting.Report) { l.writeViewUsage(in, r) }

// pass runs one accounting pass: NVML's MPS clients of every GPU of in
// (only nil: a tick) or of the GPUs of only (a poll), billed to their
// virtual devices, and under enforce the clients that pushed a device over
// its cap or escape it terminated. It never sleeps: grace periods between
// terminate_client, SIGTERM and SIGKILL are checked on later passes. It
// returns what NVML listed, by GPU (a GPU it could not list left out).
func (l *Loop) pass(ctx context.Context, in Inputs, only []gpu.UUID) map[gpu.UUID][]gpu.Process {
	if in.Policy == config.AccountingOff {
		l.acct.Tick(ctx, in.Policy, nil, nil, nil, nil)
		l.noteUsage(accounting.Report{Policy: in.Policy}, nil)
		l.notePods(accounting.Report{Policy: in.Policy}, nil, nil)
		l.writeViewUsage(in, accounting.Report{Policy: in.Policy})
		return nil
	}
	gpus := in.GPUs
	if only != nil {
		gpus = only
	}
	procs := l.sample(ctx, gpus)
	l.passSampled(ctx, in, only, procs)
	return procs
}

// sample is NVML's MPS clients of gpus (a GPU that cannot be listed left
// out, and said).
func (l *Loop) sample(ctx context.Context, gpus []gpu.UUID) map[gpu.UUID][]gpu.Process {
	procs, err := accounting.Sample(ctx, l.opts.GPUs, gpus)
	if err != nil {
		l.log.Warn("listing MPS clients; those GPUs go unmeasured this pass", "err", err)
	}
	return procs
}

// passSampled is pass's pass over what was sampled.
func (l *Loop) passSampled(ctx context.Context, in Inputs, only []gpu.UUID, procs map[gpu.UUID][]gpu.Process) {
	l.acct.SetIdentityRequired(!in.Single)
	l.acct.SetServerMemoryLimits(in.serverMemory())
	l.acct.SetViewLibrary(in.viewLibrary())
	caps, qos := in.scope()
	var r accounting.Report
	var sampled map[gpu.UUID]bool
	if only == nil {
		r = l.acct.Tick(ctx, in.Policy, procs, caps, qos, in.terms())
	} else {
		r = l.acct.Poll(ctx, in.Policy, procs, caps, qos, in.terms())
		sampled = map[gpu.UUID]bool{}
		for _, g := range only {
			sampled[g] = true
		}
	}
	l.noteUsage(r, sampled)
	l.notePods(r, sampled, in.pods)
	l.observe(r)
	l.writeViewUsage(in, in.withPodViews(r))
}

// checkConnected checks clients as they connected (the lines of the
// control.log at path), by the accounting's rules, and records what it
// found and did.
func (l *Loop) checkConnected(ctx context.Context, in Inputs, path string, lines []mps.NewClient) {
	gpus := in.Logs[path]
	if len(gpus) == 0 || in.Policy == config.AccountingOff {
		return // a log no longer followed, or accounting off
	}
	ncs := make([]accounting.NewClient, len(lines))
	for i, line := range lines {
		ncs[i] = accounting.NewClient{PID: line.PID, GPUs: gpus, At: line.At}
	}
	l.acct.SetIdentityRequired(!in.Single)
	l.acct.SetServerMemoryLimits(in.serverMemory())
	caps, qos := in.scope()
	r := l.acct.Connected(ctx, in.Policy, ncs, caps, qos, in.terms())
	l.noteConnected(r)
	l.observe(r.Report)
}

// activated tells the accounting of the clients whose context came up
// (the server.log beside the control.log at path): those caught as they
// connected are killed now under enforce.
func (l *Loop) activated(ctx context.Context, in Inputs, path string, active []mps.ActiveClient) {
	if len(active) == 0 || len(in.Logs[path]) == 0 || in.Policy == config.AccountingOff {
		return
	}
	pids := make([]int, len(active))
	for i, a := range active {
		pids[i] = a.PID
	}
	r := l.acct.Activated(ctx, in.Policy, pids)
	if len(r.Steps) > 0 {
		l.noteConnected(r)
		l.observe(r.Report)
	}
}

// observe counts the enforcement steps of one pass, and how long each
// escape had lasted at its first, so an operator can alert on them; use
// per device is read from the status.
func (l *Loop) observe(r accounting.Report) {
	if l.opts.Metrics == nil {
		return
	}
	for _, s := range r.Steps {
		l.opts.Metrics.ObserveEnforcementStep(s.Step, s.Cause)
		if least, _, ok := s.Escape.Lasted(s.At); ok && s.First {
			l.opts.Metrics.ObserveEscape(s.Cause, s.Detected, least)
		}
	}
}

// serverMemory is, for each GPU, the pinned memory limit a container of
// ours is held to without a limit of its own: its control daemon's default
// for the container's ordinal 0, which is its GPU's own in the per-GPU
// layout and, in the single layout, ordinal 0's, the largest of the
// daemon's (plan.SharedMemoryLimits).
func (in Inputs) serverMemory() map[gpu.UUID]units.MiB {
	out := map[gpu.UUID]units.MiB{}
	var largest units.MiB
	for _, u := range in.GPUs {
		out[u] = in.Limits[u].MemoryLimit
		largest = max(largest, out[u])
	}
	if in.Single {
		for _, u := range in.GPUs {
			out[u] = largest
		}
	}
	return out
}

// defaults are the defaults GPU uuid's control daemon holds (QoS).
func (in Inputs) defaults(uuid gpu.UUID) vdev.ServerDefaults {
	l := in.Limits[uuid]
	return vdev.ServerDefaults{ThreadPercentage: int(l.ThreadPercentage), ClientPriority: l.ClientPriority}
}

// viewLibrary is the view's library file name while containers get the
// view, "" otherwise: a client without it in its memory map sees the
// whole GPU.
func (in Inputs) viewLibrary() string {
	if in.ViewGiven {
		return view.LibraryFile
	}
	return ""
}

// scope is what a pass checks: the devices of the enforced GPUs and, on
// those GPUs, the claims' own devices (the backend's last answer), each
// billed against its claim's size and held to its thread share (claimQoS),
// and Cloudpods' pods, each against what its server holds (pods.go); their
// caps, and the QoS of the batch ones.
func (in Inputs) scope() (map[string]uint64, map[string]accounting.DeviceQoS) {
	qos := map[string]accounting.DeviceQoS{}
	enforced := map[gpu.UUID]bool{}
	for _, uuid := range in.GPUs {
		enforced[uuid] = true
	}
	devs := slices.Clone(in.Devices)
	byGPU := map[gpu.UUID][]vdev.Device{}
	for _, d := range in.Devices {
		byGPU[d.GPU.UUID] = append(byGPU[d.GPU.UUID], d)
	}
	for _, uuid := range in.GPUs {
		maps.Copy(qos, accounting.BatchQoS(byGPU[uuid], in.defaults(uuid)))
	}
	for _, d := range in.Claims {
		if enforced[d.GPU.UUID] {
			devs = append(devs, d)
			maps.Copy(qos, claimQoS(d, in.defaults(d.GPU.UUID)))
		}
	}
	caps := accounting.Caps(devs)
	in.addPods(caps)
	return caps, qos
}

// claimQoS is what a claim's device with a thread share below its GPU's
// default (the claim asked for threadPercentage) must keep to: MPS holds
// its clients to that share only while they keep the variable, as it does
// a batch device's, so a client that drops or raises it is an escape,
// reported and, under enforce, terminated (accounting.CheckQoS). A claim
// with the GPU's share has nothing to escape.
func claimQoS(d vdev.Device, server vdev.ServerDefaults) map[string]accounting.DeviceQoS {
	if d.ThreadPercentage >= server.ThreadPercentage {
		return nil
	}
	return map[string]accounting.DeviceQoS{d.Name().String(): {ThreadPercentage: d.ThreadPercentage, ClientPriority: d.Class.ClientPriority(), Server: server}}
}

// writeViewUsage puts each device's use, as this pass measured it, in its
// view (a file replaced only where the figure changed); with accounting
// off, 0. A device not measured keeps its last figure.
func (l *Loop) writeViewUsage(in Inputs, r accounting.Report) {
	if !in.ViewConfigured || l.opts.Views == nil {
		return
	}
	used := map[vdev.Name]units.Bytes{}
	if r.Usage.PerDevice == nil {
		for n := range l.opts.Views.Views() {
			used[n] = 0
		}
	}
	for name, d := range r.Usage.PerDevice {
		used[vdev.Name(name)] = units.Bytes(d.UsedBytes)
	}
	msg := ""
	if err := l.opts.Views.SetUsed(used); err != nil {
		msg = err.Error()
		if msg != l.viewUsedErr {
			l.log.Warn("writing the devices' use into their views", "err", err)
		}
	}
	l.viewUsedErr = msg
}
