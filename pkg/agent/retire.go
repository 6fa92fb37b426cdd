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
// What holders keep is r.listed, the backend's devices after the sync.
// The retiring GPUs are the station's part of /status.
func (m *mpsStation) retire(ctx context.Context, r *round) error {
	retiring := m.retireUnplanned(ctx, r)
	m.mu.Lock()
	m.retired = nil
	for _, uuid := range retiring {
		m.retired = append(m.retired, uuid.String())
	}
	m.mu.Unlock()
	return nil
}

func (m *mpsStation) retireUnplanned(ctx context.Context, r *round) []gpu.UUID {
	cfg, planned := r.cfg, map[gpu.UUID]bool{}
	for uuid := range r.planned {
		planned[uuid] = true
	}
	heldPerGPU := map[gpu.UUID]int{}
	for _, l := range r.listed {
		if l.Holder != "" {
			heldPerGPU[l.Device.GPU.UUID]++
		}
	}
	var retiring []gpu.UUID
	for _, uuid := range m.unplanned(cfg, planned) {
		log := m.log.With("gpu", uuid)
		gs, shared := m.retiring(cfg, uuid, log)
		if shared && len(planned) > 0 {
			delete(m.gpus, uuid) // the single daemon serves the planned GPUs on
			continue
		}
		up, err := gs.ctl.Running(ctx)
		if err != nil {
			log.Warn("asking a retired GPU's MPS control daemon", "err", err)
			retiring = append(retiring, uuid)
			continue
		}
		if !up {
			delete(m.gpus, uuid)
			continue
		}
		held := heldPerGPU[uuid]
		clients := m.connectedClients(ctx, gs)
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
		delete(m.gpus, uuid)
	}
	slices.Sort(retiring)
	m.restoreModes(ctx, cfg, planned, r.present, retiring)
	return retiring
}

// restoreModes gives a GPU back the compute mode the daemon found on it
// (recorded in the state directory when the daemon first changed it), as
// teardown does, once the daemon no longer needs the change: the GPU left
// the configuration and its MPS daemon is gone, or compute modes are no
// longer the daemon's to set (mps_set_exclusive_compute_mode: false). A GPU
// taken back into the configuration is set again and its mode recorded
// again. GPUs that are not present are left for later.
func (m *mpsStation) restoreModes(ctx context.Context, cfg *Config, planned map[gpu.UUID]bool, present map[gpu.UUID]gpu.Info, retiring []gpu.UUID) {
	modes, err := m.modes.Previous()
	if err != nil {
		m.log.Warn("reading the recorded compute modes", "err", err)
		return
	}
	for uuid, name := range modes {
		_, isPresent := present[uuid]
		inUse := planned[uuid] && cfg.Host.SetExclusiveComputeMode
		if !isPresent || inUse || slices.Contains(retiring, uuid) {
			continue
		}
		log := m.log.With("gpu", uuid)
		restored, err := m.restoreMode(ctx, uuid, name)
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
func (m *mpsStation) restoreMode(ctx context.Context, uuid gpu.UUID, name string) (restored bool, err error) {
	mode, err := gpu.ParseComputeMode(name)
	if err == nil {
		err = m.opts.Backend.SetComputeMode(ctx, uuid, mode)
	}
	if err != nil {
		return false, fmt.Errorf("restoring compute mode of %s: %w", uuid, err)
	}
	if err := m.modes.Forget(uuid); err != nil {
		return true, fmt.Errorf("forgetting the restored compute mode of %s: %w", uuid, err)
	}
	return true, nil
}

// unplanned lists GPUs with a known or findable control daemon outside the
// plan: the agent's own, and GPU-* directories in the pipe root.
func (m *mpsStation) unplanned(cfg *Config, planned map[gpu.UUID]bool) []gpu.UUID {
	seen := map[gpu.UUID]bool{}
	for uuid := range m.gpus {
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
func (m *mpsStation) connectedClients(ctx context.Context, gs *gpuState) int {
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
