package agent

import (
	"context"
	"sync"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/nri"
)

// nriStation hands the NRI plugin (issue 45, pkg/nri), which gives a
// Cloudpods pod's containers their slice's edits, what each holder holds
// on the planned GPUs, as the host's CDI spec gives it: after each sync,
// so a slice attached since shows at once. The plugin runs beside the
// agent's loop (run); without one (host.conf mps_nri off) the station does
// nothing. It has no part of /status: the plugin logs what it makes of a
// container.
type nriStation struct {
	plugin *nri.Plugin
	// entries is where the host's entries go, the view as its last write
	// gave it.
	entries *entriesStation
}

// run runs the plugin until ctx ends; the returned func waits for it.
func (n *nriStation) run(ctx context.Context) (wait func()) {
	if n.plugin == nil {
		return func() {}
	}
	var wg sync.WaitGroup
	wg.Go(func() { n.plugin.Run(ctx) })
	return wg.Wait
}

// publish is the station's stage: the devices each holder of the
// backend's holdings (r.listed) keeps on the planned GPUs, each with its
// identity file and, while containers get the view, its view.
func (n *nriStation) publish(_ context.Context, r *round) error {
	if n.plugin == nil {
		return nil
	}
	spec := n.entries.specOf(r.cfg, n.entries.viewGiven)
	d := nri.Devices{CDI: spec.CDI}
	if r.cfg.single() {
		d.PipeRoot = r.cfg.Host.CudaMPSPipeDirectory
	}
	for _, l := range r.listed {
		if _, planned := r.planned[l.Device.GPU.UUID]; !planned || l.Holder == "" {
			continue
		}
		dev := cdi.FromVirtual(l.Device, l.ID, r.cfg.pipeLog(l.Device.GPU.UUID).PipeDir)
		dev.ClientPriority = heldDevicePriority(l, r.priorities)
		if dev, err := spec.Entry(dev); err == nil {
			d.Add(l.Holder, dev)
		}
	}
	n.plugin.Set(d)
	return nil
}
