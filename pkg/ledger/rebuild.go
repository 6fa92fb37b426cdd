package ledger

import (
	"fmt"
	"slices"
	"strings"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// RebuildPending reports a rebuild that waits only for the claims: the
// checkpoint was corrupt (or its rebuild unfinished) and a reconcile has
// said what the node has.
func (l *Ledger) RebuildPending() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rebuild != nil && l.synced
}

// Rebuild makes the prepared claims again after a corrupt checkpoint,
// from every claim the API server lists: each allocated a device of this
// node's pool and reserved for a pod (the kubelet prepares a claim before
// its pod's containers start and unprepares it once they are gone) is
// prepared again, with the devices it was allocated, as published now or,
// out of the plan, as the pool's published devices (by name) still have
// them; an own device keeps the index its CDI entry had (found by its
// share ID in the claims' spec), so its containers' identity files name it
// still, and one whose index is taken gets the lowest free one. The
// rebuilt checkpoint is written, then the marker goes.
func (l *Ledger) Rebuild(claims []Allocation, published map[string]Device) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rebuild == nil {
		return nil
	}
	indexes := l.specIndexes()
	offered := map[string]Device{}
	for _, dev := range Published(l.current, nil) {
		offered[dev.Name] = dev
	}
	rebuilt := map[string]Claim{}
	// Own devices whose index their entry had is free take it first; the
	// others then get the lowest free slots.
	type later struct {
		uid string
		at  int
		r   Result
	}
	var rest []later
	for _, c := range claims {
		if !c.Allocated || !c.Reserved {
			continue
		}
		out := Claim{UID: c.UID, Namespace: c.Namespace, Name: c.Name}
		for _, r := range c.Results {
			if r.Pool != l.Pool() {
				continue
			}
			dev, ok := offered[r.Device]
			if !ok {
				dev, ok = published[r.Device]
			}
			if !ok {
				l.log.Error("a claim's device is neither planned nor published: left out of the rebuilt checkpoint",
					"claim", c.name(), "uid", c.UID, "device", r.Device)
				continue
			}
			p := Prepared{Request: r.Request, Pool: r.Pool, Device: dev}
			if dev.ClaimsDevice {
				slot, known := -1, false
				if i, ok := indexes[r.ShareID]; ok && r.ShareID != "" {
					if s, ok := claim.IsClaim(i); ok && !usedSlots(rebuilt, &out, dev.GPUUUID)[s] {
						slot, known = s, true
					}
				}
				if !known {
					rest = append(rest, later{uid: c.UID, at: len(out.Devices), r: r})
				} else if own, err := l.own(r, dev, rebuilt, &out, slot, 0); err == nil {
					p.Own = &own
				} else {
					l.log.Error("a claim's own device cannot be rebuilt: left out of the rebuilt checkpoint",
						"claim", c.name(), "uid", c.UID, "device", r.Device, "err", err)
					continue
				}
			}
			out.Devices = append(out.Devices, p)
		}
		if len(out.Devices) > 0 {
			rebuilt[c.UID] = out
		}
	}
	for _, lt := range rest {
		c := rebuilt[lt.uid]
		p := &c.Devices[lt.at]
		own, err := l.own(lt.r, p.Device, rebuilt, &Claim{}, -1, max(p.Device.VirtualNumber, l.gpus[gpu.UUID(p.Device.GPUUUID)].VirtualNumber))
		if err != nil {
			l.log.Error("a claim's own device cannot be rebuilt: left out of the rebuilt checkpoint",
				"claim", c.Namespace+"/"+c.Name, "uid", c.UID, "device", lt.r.Device, "err", err)
			continue
		}
		p.Own = &own
	}
	// A share that found no index is left out; so is a claim left empty.
	for uid, c := range rebuilt {
		c.Devices = slices.DeleteFunc(c.Devices, func(p Prepared) bool { return p.Device.ClaimsDevice && p.Own == nil })
		if len(c.Devices) == 0 {
			delete(rebuilt, uid)
			continue
		}
		rebuilt[uid] = c
	}
	if err := saveCheckpoint(l.opts.CheckpointPath, rebuilt); err != nil {
		return fmt.Errorf("rebuilding the DRA checkpoint: %w", err)
	}
	// The marker goes only now: a crash before this rebuilds again, which
	// finds the same claims.
	if err := rebuildDone(l.opts.CheckpointPath); err != nil {
		return fmt.Errorf("rebuilding the DRA checkpoint: %w", err)
	}
	l.claims, l.rebuild = rebuilt, nil
	l.log.Warn("the DRA checkpoint rebuilt from the API server's claims", "claims", len(rebuilt), "path", l.opts.CheckpointPath)
	if err := l.syncSpecLocked(); err != nil {
		l.log.Error("the claims' CDI spec not written after the rebuild; the next prepare or reconcile does", "err", err)
	}
	return nil
}

// specIndexes reads the claims' spec the previous run wrote: each share
// ID's entry names its device in its environment (vdev.EnvVar).
// Unreadable or missing, it is no help, not an error.
func (l *Ledger) specIndexes() map[string]int {
	out := map[string]int{}
	if l.spec == nil {
		return out
	}
	o := l.spec.CDI
	o.Kind = l.opts.ClaimKind
	path, err := cdi.SpecPath(o)
	if err != nil {
		return out
	}
	s, err := cdiapi.ReadSpec(path, 0)
	if err != nil {
		l.log.Warn("the claims' CDI spec of the previous run is unreadable: rebuilt claims' own devices get new indexes", "path", path, "err", err)
		return out
	}
	for _, dv := range s.Devices {
		for _, e := range dv.ContainerEdits.Env {
			if v, ok := strings.CutPrefix(e, vdev.EnvVar+"="); ok {
				if _, i, err := vdev.ParseName(v); err == nil && v != dv.Name {
					out[dv.Name] = i
				}
			}
		}
	}
	return out
}
