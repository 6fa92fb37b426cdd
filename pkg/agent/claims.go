package agent

import (
	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/plan"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// offerGPUs are the plan's GPUs as the backend is offered them: each with
// how it is shared, its virtual_number and health, and its first device's
// CDI view (as writeCDI makes it), from which a backend that prepares
// claims of any size (Kubernetes) makes each claim's own device. The
// accounting bills those devices (a.claims, from the backend's answer) as
// virtual devices, each against its claim's size.
func (a *Agent) offerGPUs(cfg *Config, p *plan.Plan, statuses []status.GPU) []backend.GPU {
	gpus := make([]backend.GPU, 0, len(p.GPUs))
	for i, gp := range p.GPUs {
		if len(gp.Devices) == 0 {
			continue
		}
		d := cdi.FromVirtual(gp.Devices[0], "", cfg.pipeLog(gp.GPU.UUID).PipeDir)
		gpus = append(gpus, backend.GPU{Device: d, Claims: gp.Sharing.Claims(), VirtualNumber: gp.VirtualNumber, Healthy: statuses[i].Healthy})
	}
	return gpus
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
