package agent

import (
	"context"
	"errors"
	"fmt"
	"io"

	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/gpu"
)

// Teardown undoes what the daemon set up on this host, for decommissioning
// or before taking MPS off: the devices leave the inventory (a device a guest
// still holds stays, marked pending removal), every MPS control daemon under
// the pipe root stops, and each GPU gets back the compute mode it had before
// the daemon first changed it. Run it with the service stopped, or the
// service starts MPS again. A GPU with connected MPS clients is refused
// unless force: stopping its daemon kills them. It works on the agent's
// options, as a new agent that has not run.
func (a *Agent) Teardown(ctx context.Context, force bool, out io.Writer) error {
	cfg, devices := a.config(), a.opts.Devices
	uuids := a.mps.unplanned(cfg, map[gpu.UUID]bool{})
	daemons := make([]*gpuState, len(uuids), len(uuids)+1)
	for i, uuid := range uuids {
		// In the single layout a <root>/<uuid> is a per-GPU daemon left
		// from before the switch: stopped in its own directory.
		daemons[i], _ = a.mps.retiring(cfg, uuid, a.log)
	}
	if cfg.single() {
		uuids = append(uuids, singleDaemon) // the one daemon in the pipe root
		daemons = append(daemons, a.mps.gpu(cfg, singleDaemon))
	}
	var busy []error
	for i, uuid := range uuids {
		gs := daemons[i]
		if n := a.mps.connectedClients(ctx, gs); n > 0 && !force {
			busy = append(busy, fmt.Errorf("GPU %s: %d MPS clients connected (stop them, or use --force, which kills them)", uuid, n))
		}
	}
	if len(busy) > 0 {
		return fmt.Errorf("nothing torn down: %w", errors.Join(busy...))
	}

	var errs []error
	if host, err := HostName(cfg.Host); err != nil {
		errs = append(errs, err)
	} else if res, err := devices.Sync(ctx, backend.Offer{Host: host}); err != nil {
		errs = append(errs, fmt.Errorf("removing devices from the inventory: %w", err))
	} else {
		fmt.Fprintf(out, "inventory: %d devices removed, %d held by guests kept (pending removal)\n", res.Deleted, res.HeldOutOfPlan)
	}
	for i, uuid := range uuids {
		if err := daemons[i].ctl.Quit(ctx); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(out, "%s: MPS control daemon stopped\n", uuid)
	}
	modes, err := a.mps.modes.Previous()
	if err != nil {
		errs = append(errs, err)
	}
	for uuid, name := range modes {
		restored, err := a.mps.restoreMode(ctx, uuid, name)
		if err != nil {
			errs = append(errs, err)
		}
		if restored {
			fmt.Fprintf(out, "%s: compute mode restored to %s\n", uuid, name)
		}
	}
	return errors.Join(errs...)
}
