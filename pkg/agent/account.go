package agent

import (
	"context"
	"maps"
	"sort"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// AccountingStatus is the last accounting tick: its policy, how its
// clients were billed, the MPS clients it could bill to no device and those
// whose environment disagreed with their identity. The per-device figures
// live in Status.Devices.
type AccountingStatus struct {
	Policy string `json:"policy"`
	// Clients counts the sample's clients by how they were billed
	// (accounting's Source* values, "unknown" for none).
	Clients    map[string]int        `json:"clients_by_source,omitempty"`
	Unknown    []UnknownProcessState `json:"unknown_processes,omitempty"`
	Mismatches []MismatchState       `json:"mismatched_processes,omitempty"`
	// QoSEscapes are clients of batch devices whose environment escapes
	// the device's QoS (qos.go).
	QoSEscapes []QoSEscapeState `json:"qos_escapes,omitempty"`
}

// UnknownProcessState is an MPS client billed to no device.
type UnknownProcessState struct {
	PID       int    `json:"pid"`
	GPU       string `json:"gpu"`
	UsedBytes uint64 `json:"used_bytes"`
	// Environment is the device its environment names, if any: not
	// believed for a process in a container.
	Environment string `json:"environment,omitempty"`
	Reason      string `json:"reason"`
}

// MismatchState is an MPS client billed by its identity file whose
// environment names another device or none, or whose own view hid the file.
type MismatchState struct {
	PID       int    `json:"pid"`
	GPU       string `json:"gpu"`
	UsedBytes uint64 `json:"used_bytes"`
	// Device is the device it is billed to, Source how that was learnt.
	Device      string `json:"device"`
	Source      string `json:"source"`
	Environment string `json:"environment"`
	Reason      string `json:"reason"`
}

// account runs one accounting tick: NVML's MPS clients of every GPU with
// enforced caps, billed to their virtual devices, and under enforce the
// client that pushed a device over its cap terminated. It never sleeps:
// grace periods between terminate_client, SIGTERM and SIGKILL are checked
// on later ticks.
func (a *Agent) account(ctx context.Context) {
	policy := a.config().Host.Accounting
	if policy == config.AccountingOff {
		a.acct.Tick(ctx, policy, nil, nil, nil, nil)
		a.noteUsage(accounting.Report{Policy: policy})
		return
	}
	var devs []vdev.Device
	var uuids []string
	terms := map[string]accounting.Terminator{}
	qos := map[string]accounting.DeviceQoS{}
	for uuid := range a.planned {
		if gs := a.gpus[uuid]; gs != nil && gs.enforced {
			uuids = append(uuids, uuid)
			terms[uuid] = gs.ctl
			maps.Copy(qos, accounting.BatchQoS(a.planned[uuid], serverDefaultsHeld(gs)))
		}
	}
	sort.Strings(uuids)
	for _, uuid := range uuids {
		devs = append(devs, a.planned[uuid]...)
	}
	procs, err := accounting.Sample(ctx, a.opts.Backend, uuids)
	if err != nil {
		a.log.Warn("listing MPS clients; those GPUs go unmeasured this tick", "err", err)
	}
	r := a.acct.Tick(ctx, policy, procs, accounting.Caps(devs), qos, terms)
	a.noteUsage(r)
	a.met.observeAccounting(r)
}

// setDevices records the host's virtual devices as the last sync left
// them in the inventory, in its order, keeping the last accounting figures
// of devices that remain. A device gone from the inventory is gone from
// the status (and from /metrics).
func (a *Agent) setDevices(order []vdev.Name) {
	a.mu.Lock()
	defer a.mu.Unlock()
	prev := map[string]DeviceStatus{}
	for _, d := range a.status.Devices {
		prev[d.Name] = d
	}
	devs := make([]DeviceStatus, 0, len(order))
	for _, name := range order {
		l, ok := a.listed[name]
		if !ok {
			continue
		}
		dev := l.Device
		gi := -1 // a GPU out of the plan
		if _, ok := a.planned[dev.GPU.UUID]; ok {
			gi = dev.GPU.Index
		}
		d := DeviceStatus{
			Name: name.String(), ID: l.ID, Addr: dev.Addr(), GPU: dev.GPU.UUID, GPUIndex: gi,
			CapBytes: uint64(dev.MemoryLimit.Bytes()), ThreadPercentage: dev.ThreadPercentage,
			Guest: l.Guest, Healthy: l.Healthy, PendingRemoval: l.PendingRemoval, CDIName: l.CDIName,
		}
		if l.ClassKnown {
			d.QoSClass, d.ClientPriority = string(dev.Class), dev.Class.ClientPriority()
		}
		if p, ok := prev[d.Name]; ok {
			d.UsedBytes, d.Clients, d.Measured, d.OverCap, d.LastStep = p.UsedBytes, p.Clients, p.Measured, p.OverCap, p.LastStep
		}
		devs = append(devs, d)
	}
	a.status.Devices = devs
}

// noteUsage copies one accounting tick into the status: the policy, the
// unknown clients, and each device's use, clients, over-cap state and the
// last enforcement step on it. A device the tick did not measure (its GPU
// unreadable, accounting off) is marked so, not shown as unused.
func (a *Agent) noteUsage(r accounting.Report) {
	over := map[string]bool{}
	for _, o := range r.Decision.Over {
		over[o.Device] = true
	}
	last := map[string]string{}
	for _, s := range r.Steps {
		last[s.Device] = s.Step
	}
	st := AccountingStatus{Policy: string(r.Policy)}
	if r.Usage.PerDevice != nil {
		st.Clients = map[string]int{"unknown": len(r.Usage.Unknown)}
		for _, d := range r.Usage.PerDevice {
			for _, c := range d.Clients {
				st.Clients[c.Source]++
			}
		}
	}
	for _, p := range r.Usage.Unknown {
		st.Unknown = append(st.Unknown, UnknownProcessState{PID: p.PID, GPU: p.GPU, UsedBytes: p.UsedMemoryBytes, Environment: p.Device, Reason: p.Reason})
	}
	for _, m := range r.Usage.Mismatches {
		st.Mismatches = append(st.Mismatches, MismatchState{PID: m.PID, GPU: m.GPU, UsedBytes: m.UsedBytes,
			Device: m.Device, Source: m.Source, Environment: m.Environment, Reason: m.Reason})
	}
	for _, e := range r.Usage.Escapes {
		st.QoSEscapes = append(st.QoSEscapes, QoSEscapeState{PID: e.PID, GPU: e.GPU, UsedBytes: e.UsedBytes,
			Device: e.Device, Source: e.Source, Environment: e.Env, Reason: e.Reason})
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.status.Accounting = &st
	for i := range a.status.Devices {
		d := &a.status.Devices[i]
		u, measured := r.Usage.PerDevice[d.Name]
		d.UsedBytes, d.Clients, d.Measured, d.OverCap = u.UsedBytes, len(u.PIDs), measured, over[d.Name]
		if step, ok := last[d.Name]; ok {
			d.LastStep = step
		}
	}
}
