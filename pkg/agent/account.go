package agent

import (
	"context"
	"sort"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// AccountingStatus is the last accounting tick, per virtual device.
type AccountingStatus struct {
	Policy  string                `json:"policy"`
	Devices []DeviceAccounting    `json:"devices,omitempty"`
	Unknown []UnknownProcessState `json:"unknown_processes,omitempty"`
}

// DeviceAccounting is one virtual device's memory, summed over its clients.
type DeviceAccounting struct {
	Name      string `json:"name"`
	GPU       string `json:"gpu"`
	CapBytes  uint64 `json:"cap_bytes"`
	UsedBytes uint64 `json:"used_bytes"`
	// Measured is false when the GPU's process list could not be read.
	Measured bool  `json:"measured"`
	PIDs     []int `json:"pids,omitempty"`
	OverCap  bool  `json:"over_cap,omitempty"`
	// LastStep is what enforcement last did on one of its clients.
	LastStep string `json:"last_step,omitempty"`
}

// UnknownProcessState is an MPS client billed to no device.
type UnknownProcessState struct {
	PID       int    `json:"pid"`
	GPU       string `json:"gpu"`
	UsedBytes uint64 `json:"used_bytes"`
	Reason    string `json:"reason"`
}

// account runs one accounting tick: NVML's MPS clients of every GPU with
// enforced caps, billed to their virtual devices, and under enforce the
// client that pushed a device over its cap terminated. It never sleeps:
// grace periods between terminate_client, SIGTERM and SIGKILL are checked
// on later ticks.
func (a *Agent) account(ctx context.Context) {
	policy, err := accounting.ParsePolicy(a.config().Host.Accounting)
	if err != nil {
		a.log.Error("accounting policy", "err", err)
		return
	}
	if policy == accounting.PolicyOff {
		a.acct.Tick(ctx, policy, nil, nil, nil)
		a.setAccounting(AccountingStatus{Policy: string(policy)})
		a.noteUsage(AccountingStatus{})
		return
	}
	var devs []vdev.Device
	var uuids []string
	terms := map[string]accounting.Terminator{}
	for uuid := range a.planned {
		if gs := a.gpus[uuid]; gs != nil && gs.enforced {
			uuids = append(uuids, uuid)
			terms[uuid] = gs.ctl
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
	caps := accounting.Caps(devs)
	r := a.acct.Tick(ctx, policy, procs, caps, terms)
	st := accountingStatus(r, devs, caps)
	a.setAccounting(st)
	a.noteUsage(st)
	a.met.observeAccounting(r, caps)
}

func accountingStatus(r accounting.Report, devs []vdev.Device, caps map[string]uint64) AccountingStatus {
	st := AccountingStatus{Policy: string(r.Policy)}
	over := map[string]bool{}
	for _, o := range r.Decision.Over {
		over[o.Device] = true
	}
	last := map[string]string{}
	for _, s := range r.Steps {
		last[s.Device] = s.Step
	}
	for _, d := range devs {
		name := accounting.DeviceName(d.GPU.UUID, d.Index)
		u, measured := r.Usage.PerDevice[name]
		st.Devices = append(st.Devices, DeviceAccounting{
			Name: name, GPU: d.GPU.UUID, CapBytes: caps[name], UsedBytes: u.UsedBytes, Measured: measured,
			PIDs: u.PIDs, OverCap: over[name], LastStep: last[name],
		})
	}
	for _, p := range r.Usage.Unknown {
		st.Unknown = append(st.Unknown, UnknownProcessState{PID: p.PID, GPU: p.GPU, UsedBytes: p.UsedMemoryBytes, Reason: p.Reason})
	}
	return st
}

func (a *Agent) setAccounting(st AccountingStatus) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.status.Accounting = &st
}

// setDevices records the host's virtual devices from the inventory's rows,
// keeping the last accounting figures of devices that remain. A device gone
// from the rows is gone from the status (and from /metrics).
func (a *Agent) setDevices(rows []api.IsolatedDevice, gpus []GPUStatus) {
	a.mu.Lock()
	defer a.mu.Unlock()
	prev := map[string]DeviceStatus{}
	for _, d := range a.status.Devices {
		prev[d.Name] = d
	}
	index := map[string]int{}
	for _, g := range gpus {
		index[g.UUID] = g.Index
	}
	devs := make([]DeviceStatus, 0, len(rows))
	for _, r := range rows {
		uuid, i, ok := rowName(r)
		if !ok {
			continue
		}
		name := accounting.DeviceName(uuid, i)
		gi, known := index[uuid]
		if !known {
			gi = -1
		}
		d := DeviceStatus{
			Name: name, ID: r.ID, Addr: r.Addr, GPU: uuid, GPUIndex: gi,
			CapBytes: uint64(r.MPSMemoryLimit) << 20, ThreadPercentage: r.MPSThreadPercentage,
			Guest: r.GuestID, Healthy: !r.Unhealthy, PendingRemoval: r.PendingRemoval, CDIName: r.CDIName,
		}
		if p, ok := prev[name]; ok {
			d.UsedBytes, d.Clients, d.Measured, d.OverCap = p.UsedBytes, p.Clients, p.Measured, p.OverCap
		}
		devs = append(devs, d)
	}
	a.status.Devices = devs
}

// noteUsage copies one accounting tick into the devices' status.
func (a *Agent) noteUsage(st AccountingStatus) {
	a.mu.Lock()
	defer a.mu.Unlock()
	byName := map[string]DeviceAccounting{}
	for _, d := range st.Devices {
		byName[d.Name] = d
	}
	for i := range a.status.Devices {
		d := &a.status.Devices[i]
		u, ok := byName[d.Name]
		d.UsedBytes, d.Clients, d.Measured, d.OverCap = u.UsedBytes, len(u.PIDs), ok && u.Measured, u.OverCap
	}
}
