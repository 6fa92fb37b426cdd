package agent

import (
	"context"
	"log/slog"
	"slices"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/plan"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// Per-device QoS (issue 13) in the agent: a GPU's control daemon holds the
// defaults its devices need (the largest share, and below normal client
// priority when the GPU has batch devices, vdev.DefaultsOf); each device's
// share and priority reach its containers through the CDI spec; status and
// metrics show them.
//
// The control has no per-server priority command, so a server that was
// running when the default priority changed keeps the old one for the
// clients that connect to it. The agent remembers such servers and shuts
// each down once it has no client, so the next client starts a server with
// the new default. A server busy meanwhile is shown in the status
// (servers_at_old_priority); nothing of it is read back, so nothing flaps.

// serverDefaults are the defaults gp's control daemon must hold: the GPU's
// own, or in the single layout the one daemon's for all its GPUs.
func (a *Agent) serverDefaults(cfg *Config, gp plan.GPUPlan) vdev.ServerDefaults {
	if cfg.single() {
		return a.layout.defaults
	}
	return gp.Defaults()
}

// priorityBefore is the default client priority the GPU's control daemon
// held before this reconcile sets one: the one the agent set last, or, on
// first sight of an adopted daemon, the one it reads (a daemon left by an
// earlier configuration may hold 1). known is false when it cannot be read.
func (a *Agent) priorityBefore(ctx context.Context, gs *gpuState, adopted bool) (p int, known bool) {
	if gs.limits != (mps.Limits{}) {
		return gs.limits.ClientPriority, true
	}
	if !adopted {
		return vdev.PriorityNormal, true // a new daemon starts at 0
	}
	d, err := gs.ctl.Defaults(ctx)
	if err != nil {
		return 0, false
	}
	return d.ClientPriority, true
}

// notePriorityChange remembers the servers running when the default client
// priority changed from before to now: they keep before.
func notePriorityChange(gs *gpuState, log *slog.Logger, before int, known bool, now int, servers []int) {
	if known && before == now {
		return
	}
	if gs.oldPriority == nil {
		gs.oldPriority = map[int]bool{}
	}
	for _, pid := range servers {
		gs.oldPriority[pid] = true
	}
	if len(servers) > 0 {
		log.Info("default MPS client priority changed; running servers keep the old one until they are idle and restarted",
			"client_priority", now, "servers", servers)
	}
}

// restartIdleOldServers shuts down the servers of st that started under an
// old default priority and have no client now; the next client starts a
// server with the current default. It returns those still busy.
func (a *Agent) restartIdleOldServers(ctx context.Context, gs *gpuState, log *slog.Logger, servers []ServerState) []int {
	if len(gs.oldPriority) == 0 {
		return nil
	}
	running := map[int]ServerState{}
	for _, s := range servers {
		running[s.PID] = s
	}
	var busy []int
	for pid := range gs.oldPriority {
		s, ok := running[pid]
		switch {
		case !ok:
			delete(gs.oldPriority, pid) // gone by itself
		case s.Clients > 0:
			busy = append(busy, pid)
		default:
			if err := gs.ctl.ShutdownServer(ctx, pid); err != nil {
				log.Warn("restarting an idle MPS server for the new client priority", "server", pid, "err", err)
				busy = append(busy, pid)
				continue
			}
			delete(gs.oldPriority, pid)
			log.Info("idle MPS server shut down: the next client starts one with the new client priority", "server", pid)
		}
	}
	slices.Sort(busy)
	return busy
}

// deviceClass is the QoS class of device index of GPU uuid: the plan's, or
// for a device that left the plan (held by a guest) the one its spec entry
// last carried; ok is false when neither knows it.
func (a *Agent) deviceClass(uuid string, index int) (c vdev.Class, ok bool) {
	for _, d := range a.planned[uuid] {
		if d.Index == index {
			return d.Class, true
		}
	}
	c, ok = a.cdiClasses[vdev.Name(uuid, index)]
	return c, ok
}

// heldDevicePriority is the client priority of a held device that left the
// plan: its last class, or, not known (the daemon restarted since), the
// default of its GPU's control daemon, which is what the device's clients
// get without the variable anyway.
func (a *Agent) heldDevicePriority(uuid string, index int) int {
	if c, ok := a.deviceClass(uuid, index); ok {
		return c.ClientPriority()
	}
	if gs := a.gpus[uuid]; gs != nil && gs.limits != (mps.Limits{}) {
		return gs.limits.ClientPriority
	}
	return vdev.PriorityNormal
}

// gpuQoS is what a GPU's status says of its QoS; nil without mps_qos.
func gpuQoS(gp plan.GPUPlan) *GPUQoS {
	if !gp.QoS.Active(gp.N) {
		return nil
	}
	q := &GPUQoS{ReservePercent: gp.QoS.ReservePercent}
	for _, d := range gp.Devices {
		switch d.Class {
		case vdev.ClassLatency:
			q.LatencySlices = append(q.LatencySlices, d.Index)
		case vdev.ClassBatch:
			q.BatchThreadPercentage = d.ThreadPercentage
		}
	}
	return q
}

// GPUQoS is a GPU's mps_qos as the status shows it.
type GPUQoS struct {
	LatencySlices         []int `json:"latency_slices"`
	BatchThreadPercentage int   `json:"batch_thread_percentage"`
	ReservePercent        int   `json:"reserve_percent"`
}

// QoSEscapeState is a client of a batch device whose environment escapes
// the device's QoS: it lacks or raises CUDA_MPS_ACTIVE_THREAD_PERCENTAGE or
// CUDA_MPS_CLIENT_PRIORITY.
type QoSEscapeState struct {
	PID       int    `json:"pid"`
	GPU       string `json:"gpu"`
	UsedBytes uint64 `json:"used_bytes"`
	// Device is the device it is billed to, Source how that was learnt.
	Device      string            `json:"device"`
	Source      string            `json:"source"`
	Environment accounting.QoSEnv `json:"environment"`
	Reason      string            `json:"reason"`
}

// serverDefaultsHeld are the defaults the GPU's control daemon holds, as
// the agent set and read them back.
func serverDefaultsHeld(gs *gpuState) vdev.ServerDefaults {
	return vdev.ServerDefaults{ThreadPercentage: int(gs.limits.ThreadPercentage), ClientPriority: gs.limits.ClientPriority}
}
