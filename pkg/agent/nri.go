package agent

import (
	"context"
	"slices"
	"sync"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/nri"
)

// The NRI plugin's wiring (issue 45, pkg/nri): run beside the loop, and
// handed after each reconcile what each server holds, as CDI devices.

// runNRI runs the plugin until ctx ends; the returned func waits for it.
func (a *Agent) runNRI(ctx context.Context) (wait func()) {
	if a.opts.NRI == nil {
		return func() {}
	}
	var wg sync.WaitGroup
	wg.Go(func() { a.opts.NRI.Run(ctx) })
	return wg.Wait
}

// publishNRI hands the plugin the slices each holder of the last rows
// holds on the planned GPUs, as the host's CDI spec gives them: in the
// main loop, which owns the plan and the rows.
func (a *Agent) publishNRI() {
	if a.opts.NRI == nil {
		return
	}
	cfg := a.config()
	d := nri.Devices{CDI: a.cdiOptions(cfg), Held: map[gpu.UUID]map[string][]cdi.Device{}}
	if cfg.single() {
		d.PipeRoot = cfg.Host.CudaMPSPipeDirectory
	}
	ids := identityStore(cfg)
	for name, l := range a.listed {
		g := l.Device.GPU.UUID
		if _, planned := a.planned[g]; !planned || l.Guest == "" {
			continue
		}
		dev := cdi.FromVirtual(l.Device, l.ID, cfg.pipeLog(g).PipeDir)
		dev.ClientPriority = a.heldDevicePriority(l)
		var err error
		if dev.IdentityFile, err = ids.Path(name); err != nil {
			continue
		}
		if a.viewOpts.On() {
			if dev.ViewDir, err = a.views.Store().Path(name); err != nil {
				continue
			}
		}
		if d.Held[g] == nil {
			d.Held[g] = map[string][]cdi.Device{}
		}
		d.Held[g][l.Guest] = append(d.Held[g][l.Guest], dev)
	}
	for _, byHolder := range d.Held {
		for h := range byHolder {
			slices.SortFunc(byHolder[h], func(x, y cdi.Device) int { return x.Index - y.Index })
		}
	}
	a.opts.NRI.Set(d)
}
