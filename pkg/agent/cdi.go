package agent

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/identity"
	"yunion.io/x/mps-daemon/pkg/plan"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// CDIStatus is the last write of the host's CDI spec.
type CDIStatus struct {
	Path    string `json:"path,omitempty"`
	Devices int    `json:"devices"`
	Error   string `json:"error,omitempty"`
}

func (a *Agent) cdiOptions(cfg *Config) cdi.Options {
	return cdi.Options{Dir: cfg.Host.CDIDirectory, ShmPath: cfg.Host.CDIShmPath, DevRoot: a.opts.DevRoot}
}

// CDIName is the name a container runtime is given for a virtual device.
func CDIName(gpuUUID string, index int) string {
	return cdi.QualifiedName(cdi.DefaultKind, vdev.Name(gpuUUID, index))
}

// writeCDI makes the host's CDI spec hold every device that may be handed
// out (GPUs with enforced caps and no fault) and every device a guest still
// holds (pending removal too, so its container can restart), under both
// names: <GPU UUID>::<i> and, once the inventory has given one, the id.
// Ids come from rows (the inventory's answer) or, while the inventory is
// away, from the last ones seen: dropping them would break containers
// started by id. An invalid spec is never written; the old one stays.
func (a *Agent) writeCDI(cfg *Config, p *plan.Plan, statuses []GPUStatus, rows []api.IsolatedDevice) {
	if rows != nil {
		a.cdiIDs = map[string]string{}
		for _, r := range rows {
			if uuid, i, ok := rowName(r); ok {
				a.cdiIDs[vdev.Name(uuid, i)] = r.ID
			}
		}
	}
	var devs []cdi.Device
	seen := map[string]bool{}
	for i, gp := range p.GPUs {
		if !statuses[i].Healthy {
			continue
		}
		pipe := cfg.pipeLog(gp.GPU.UUID).PipeDir
		for _, d := range gp.Devices {
			name := vdev.Name(gp.GPU.UUID, d.Index)
			seen[name] = true
			devs = append(devs, cdi.FromVirtual(d, a.cdiIDs[name], pipe))
		}
	}
	for _, r := range rows {
		uuid, i, ok := rowName(r)
		minor, known := a.minors[uuid]
		if !ok || !known || r.GuestID == "" || seen[vdev.Name(uuid, i)] {
			continue
		}
		devs = append(devs, cdi.Device{GPUUUID: uuid, Index: i, ID: r.ID, Minor: minor, PipeDir: cfg.pipeLog(uuid).PipeDir,
			MemoryLimitMiB: r.MPSMemoryLimit, ThreadPercentage: r.MPSThreadPercentage})
	}
	st := CDIStatus{Devices: len(devs)}
	path, changed, err := a.syncCDI(cfg, devs)
	st.Path = path
	if err != nil {
		st.Error = err.Error()
		a.log.Error("CDI spec not written; the previous one stays", "err", err)
	} else if changed {
		a.log.Info("CDI spec written", "path", path, "devices", len(devs))
	}
	a.mu.Lock()
	a.status.CDI = &st
	a.mu.Unlock()
}

// rowName is a row's GPU UUID and slice index (from addr "<bus>-<i>").
func rowName(r api.IsolatedDevice) (string, int, bool) {
	k := strings.LastIndexByte(r.Addr, '-')
	if k < 0 || r.DevicePath == "" {
		return "", 0, false
	}
	i, err := strconv.Atoi(r.Addr[k+1:])
	return r.DevicePath, i, err == nil
}

// identityStore holds the files that name each virtual device inside its
// containers (<state directory>/identity).
func identityStore(cfg *Config) identity.Store {
	return identity.Store{Dir: filepath.Join(cfg.Host.StateDirectory, "identity")}
}

// syncCDI writes the spec once every device's identity file exists, so a
// runtime never meets a spec that mounts a file that is not there; when a
// file cannot be made, the previous spec stays.
func (a *Agent) syncCDI(cfg *Config, devs []cdi.Device) (string, bool, error) {
	store := identityStore(cfg)
	names := make([]string, len(devs))
	for i := range devs {
		names[i] = devs[i].Name()
		p, err := store.Path(names[i])
		if err != nil {
			return "", false, err
		}
		devs[i].IdentityFile = p
	}
	if err := store.Ensure(names); err != nil {
		return "", false, fmt.Errorf("identity files: %w", err)
	}
	return cdi.Sync(a.cdiOptions(cfg), devs)
}
