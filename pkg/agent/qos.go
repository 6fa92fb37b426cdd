package agent

import (
	"yunion.io/x/mps-daemon/pkg/plan"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// Per-device QoS (issue 13) in the agent: a GPU's control daemon holds the
// defaults its devices need (the largest share, and below normal client
// priority when the GPU has batch devices, vdev.DefaultsOf); each device's
// share and priority reach its containers through the CDI spec; status and
// metrics show them.
//
// A running MPS server gives the clients that connect after a change of
// the default client priority the new default (measured on an H100,
// docs/gpu-runs/qos-probe-running.md), so setting the default is all a
// change of mps_qos needs: no server is restarted for it.

// serverDefaults are the defaults gp's control daemon must hold: the GPU's
// own, or in the single layout the one daemon's for all its GPUs.
func (m *mpsStation) serverDefaults(cfg *Config, gp plan.GPUPlan) vdev.ServerDefaults {
	if cfg.single() {
		return m.layout.defaults
	}
	return gp.Defaults()
}

// gpuQoS is what a GPU's status says of its QoS; nil without mps_qos.
func gpuQoS(gp plan.GPUPlan) *status.QoS {
	if !gp.QoS.Active(gp.VirtualNumber) {
		return nil
	}
	q := &status.QoS{ReservePercent: gp.QoS.ReservePercent}
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
