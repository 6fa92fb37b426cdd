package agent

import (
	"cmp"

	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/plan"
	"yunion.io/x/mps-daemon/pkg/status"
)

// offerGPUs are the plan's GPUs as the backend is offered them: each with
// how it is shared, its virtual_number and health, and its devices as the
// CDI spec makes their entries, from which a backend of rows makes its rows
// and one that prepares claims of any size (Kubernetes) makes each claim's
// own device. The accounting bills those devices (a.claims, from the
// backend's answer) as virtual devices, each against its claim's size.
func (a *Agent) offerGPUs(cfg *Config, p *plan.Plan, statuses []status.GPU) []backend.GPU {
	gpus := make([]backend.GPU, 0, len(p.GPUs))
	for i, gp := range p.GPUs {
		if len(gp.Devices) == 0 {
			continue
		}
		g := backend.GPU{Sharing: cmp.Or(gp.Sharing, config.SharingSlices), VirtualNumber: gp.VirtualNumber, Healthy: statuses[i].Healthy,
			Devices: make([]cdi.Device, len(gp.Devices))}
		pipe := cfg.pipeLog(gp.GPU.UUID).PipeDir
		for j, d := range gp.Devices {
			g.Devices[j] = cdi.FromVirtual(d, "", pipe)
		}
		gpus = append(gpus, g)
	}
	return gpus
}
