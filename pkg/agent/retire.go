package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"yunion.io/x/mps-daemon/pkg/gpu"
)

// retire stops the MPS control daemon of every GPU that is no longer in the
// plan (taken out of the YAML, or MPS switched off) once nothing needs it: no
// device of that GPU is held by a guest and no client is connected. Until
// then the daemon runs on, the held devices stay in the inventory marked
// pending removal (the sync does that), and the GPU is listed as retiring.
// Daemons found in the pipe root that this process never started (a GPU
// removed while the daemon was down) are retired the same way.
// What guests hold is a.listed, the inventory's devices after the sync.
func (a *Agent) retire(ctx context.Context, cfg *Config, planned map[gpu.UUID]bool) []gpu.UUID {
	heldPerGPU := map[gpu.UUID]int{}
	for _, l := range a.listed {
		if l.Holder != "" {
			heldPerGPU[l.Device.GPU.UUID]++
		}
	}
	var retiring []gpu.UUID
	for _, uuid := range a.unplanned(cfg, planned) {
		log := a.log.With("gpu", uuid)
		gs, shared := a.retiring(cfg, uuid, log)
		if shared && len(planned) > 0 {
			delete(a.gpus, uuid) // the single daemon serves the planned GPUs on
			continue
		}
		up, err := gs.ctl.Running(ctx)
		if err != nil {
			log.Warn("asking a retired GPU's MPS control daemon", "err", err)
			retiring = append(retiring, uuid)
			continue
		}
		if !up {
			delete(a.gpus, uuid)
			continue
		}
		held := heldPerGPU[uuid]
		clients := a.connectedClients(ctx, gs)
		if held > 0 || clients > 0 {
			log.Info("GPU left the configuration; its MPS daemon stays while it is in use", "held_devices", held, "clients", clients)
			retiring = append(retiring, uuid)
			continue
		}
		if err := gs.ctl.Quit(ctx); err != nil {
			log.Warn("stopping a retired GPU's MPS control daemon", "err", err)
			retiring = append(retiring, uuid)
			continue
		}
		log.Info("GPU left the configuration and nothing uses it: MPS control daemon stopped")
		delete(a.gpus, uuid)
	}
	slices.Sort(retiring)
	a.restoreModes(ctx, cfg, planned, retiring)
	return retiring
}

// restoreModes gives a GPU back the compute mode the daemon found on it
// (recorded in the state directory when the daemon first changed it), as
// teardown does, once the daemon no longer needs the change: the GPU left
// the configuration and its MPS daemon is gone, or compute modes are no
// longer the daemon's to set (mps_set_exclusive_compute_mode: false). A GPU
// taken back into the configuration is set again and its mode recorded
// again. GPUs that are not present are left for later.
func (a *Agent) restoreModes(ctx context.Context, cfg *Config, planned map[gpu.UUID]bool, retiring []gpu.UUID) {
	modes, err := a.state.previousModes()
	if err != nil {
		a.log.Warn("reading the recorded compute modes", "err", err)
		return
	}
	for uuid, name := range modes {
		_, present := a.present[uuid]
		inUse := planned[uuid] && cfg.Host.SetExclusiveComputeMode
		if !present || inUse || slices.Contains(retiring, uuid) {
			continue
		}
		log := a.log.With("gpu", uuid)
		restored, err := a.restoreMode(ctx, uuid, name)
		if err != nil {
			log.Warn("restoring the compute mode the GPU had", "mode", name, "err", err)
		}
		if restored {
			log.Info("compute mode restored: the daemon no longer needs the GPU in Exclusive_Process", "mode", name)
		}
	}
}

// restoreMode sets GPU uuid back to the recorded compute mode name and
// forgets the record; restored says whether the GPU has its mode back (the
// error may then be about forgetting it).
func (a *Agent) restoreMode(ctx context.Context, uuid gpu.UUID, name string) (restored bool, err error) {
	mode, err := gpu.ParseComputeMode(name)
	if err == nil {
		err = a.opts.Backend.SetComputeMode(ctx, uuid, mode)
	}
	if err != nil {
		return false, fmt.Errorf("restoring compute mode of %s: %w", uuid, err)
	}
	if err := a.state.forgetMode(uuid); err != nil {
		return true, fmt.Errorf("forgetting the restored compute mode of %s: %w", uuid, err)
	}
	return true, nil
}

// unplanned lists GPUs with a known or findable control daemon outside the
// plan: the agent's own, and GPU-* directories in the pipe root.
func (a *Agent) unplanned(cfg *Config, planned map[gpu.UUID]bool) []gpu.UUID {
	seen := map[gpu.UUID]bool{}
	for uuid := range a.gpus {
		if !planned[uuid] {
			seen[uuid] = true
		}
	}
	entries, _ := os.ReadDir(cfg.Host.CudaMPSPipeDirectory)
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() && strings.HasPrefix(name, "GPU-") && !planned[gpu.UUID(name)] {
			if _, err := os.Stat(filepath.Join(cfg.Host.CudaMPSPipeDirectory, name)); err == nil {
				seen[gpu.UUID(name)] = true
			}
		}
	}
	out := make([]gpu.UUID, 0, len(seen))
	for uuid := range seen {
		out = append(out, uuid)
	}
	slices.Sort(out)
	return out
}

// connectedClients counts the clients of a GPU's servers; an answer that
// cannot be read counts as one, so a daemon is never stopped on a guess.
func (a *Agent) connectedClients(ctx context.Context, gs *gpuState) int {
	servers, err := gs.ctl.Servers(ctx)
	if err != nil {
		return 1
	}
	n := 0
	for _, pid := range servers {
		c, err := gs.ctl.Clients(ctx, pid)
		if err != nil {
			return 1
		}
		n += len(c)
	}
	return n
}
