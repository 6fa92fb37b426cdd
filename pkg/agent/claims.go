package agent

import (
	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/plan"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// ClaimSizer is an Inventory that gives GPUs to Kubernetes claims of any
// size (pkg/dra.Driver; the device YAML's sharing: claims). Before each
// sync the agent tells it every planned GPU and where claims' CDI entries
// and identity files go (it writes them itself, when a claim is prepared);
// the accounting bills the devices of its prepared claims as virtual
// devices, each against its claim's size.
type ClaimSizer interface {
	SetGPUs(spec claim.Spec, gpus []claim.GPU)
	ClaimDevices() []vdev.Device
}

// tellClaimSizer hands the plan's GPUs to an Inventory that is a
// ClaimSizer: each as its first device's CDI view, as writeCDI makes it.
func (a *Agent) tellClaimSizer(cfg *Config, p *plan.Plan, statuses []status.GPU) {
	cs, ok := a.opts.Inventory.(ClaimSizer)
	if !ok {
		return
	}
	gpus := make([]claim.GPU, 0, len(p.GPUs))
	for i, gp := range p.GPUs {
		if len(gp.Devices) == 0 {
			continue
		}
		d := cdi.FromVirtual(gp.Devices[0], "", cfg.pipeLog(gp.GPU.UUID).PipeDir)
		gpus = append(gpus, claim.GPU{Device: d, Claims: gp.Sharing.Claims(), MaxClaims: gp.N, Healthy: statuses[i].Healthy})
	}
	cs.SetGPUs(claim.Spec{CDI: a.cdiOptions(cfg), Identity: identityStore(cfg), View: a.views, Log: a.log}, gpus)
}

// claimDevices are the devices of the prepared claims, when the Inventory
// sizes devices to claims.
func (a *Agent) claimDevices() []vdev.Device {
	if cs, ok := a.opts.Inventory.(ClaimSizer); ok {
		return cs.ClaimDevices()
	}
	return nil
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
