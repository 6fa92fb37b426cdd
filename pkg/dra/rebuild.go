package dra

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// rebuildTimeout bounds the API server's answers to a rebuild.
const rebuildTimeout = 10 * time.Second

// rebuildLocked rebuilds the prepared claims from the API server after a
// corrupt checkpoint, once the plugin has a client and a reconcile has said
// what the node has: every claim allocated a device of this node's pool
// and reserved for a pod (the kubelet prepares a claim before its pod's
// containers start and unprepares it once they are gone) is prepared
// again, with the devices it was allocated, as published now or, out of
// the plan, as the node's ResourceSlices still have them; a share keeps
// the index its CDI entry had (found by its share ID in the claims' spec),
// so its containers' identity files name it still. Until it succeeds
// nothing is published, prepared or unprepared.
func (d *Driver) rebuildLocked(ctx context.Context) error {
	if d.rebuild == nil || d.client == nil || !d.synced {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, rebuildTimeout)
	defer cancel()
	claims, err := d.listClaims(ctx)
	if err != nil {
		return fmt.Errorf("rebuilding the DRA checkpoint: %w", err)
	}
	published, err := d.listPublished(ctx)
	if err != nil {
		return fmt.Errorf("rebuilding the DRA checkpoint: %w", err)
	}
	indexes := d.specIndexes()
	offered := map[string]Device{}
	for _, dev := range Published(d.current, nil) {
		offered[dev.Name] = dev
	}
	rebuilt := map[types.UID]Claim{}
	// Shares whose index their entry had is free take it first; the
	// others then get the lowest free slots.
	type later struct {
		uid types.UID
		at  int
		r   resourceapi.DeviceRequestAllocationResult
	}
	var rest []later
	for _, c := range claims {
		if c.Status.Allocation == nil || len(c.Status.ReservedFor) == 0 {
			continue
		}
		out := Claim{UID: c.UID, Namespace: c.Namespace, Name: c.Name}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != d.opts.DriverName || r.Pool != d.Pool() {
				continue
			}
			dev, ok := offered[r.Device]
			if !ok {
				dev, ok = published[r.Device]
			}
			if !ok {
				d.log.Error("a claim's device is neither planned nor published: left out of the rebuilt checkpoint",
					"claim", c.Namespace+"/"+c.Name, "uid", c.UID, "device", r.Device)
				continue
			}
			p := Prepared{Request: r.Request, Pool: r.Pool, Device: dev}
			if dev.Sized {
				slot, known := -1, false
				if r.ShareID != nil {
					if i, ok := indexes[*r.ShareID]; ok {
						if s, ok := claim.IsClaim(i); ok && !usedSlots(rebuilt, &out, dev.GPUUUID)[s] {
							slot, known = s, true
						}
					}
				}
				if !known {
					rest = append(rest, later{uid: c.UID, at: len(out.Devices), r: r})
				} else if sh, err := d.makeShare(r, dev, slot); err == nil {
					p.Share = &sh
				} else {
					d.log.Error("a claim's share cannot be rebuilt: left out of the rebuilt checkpoint",
						"claim", c.Namespace+"/"+c.Name, "uid", c.UID, "device", r.Device, "err", err)
					continue
				}
			}
			out.Devices = append(out.Devices, p)
		}
		if len(out.Devices) > 0 {
			rebuilt[c.UID] = out
		}
	}
	for _, l := range rest {
		c := rebuilt[l.uid]
		p := &c.Devices[l.at]
		slot, err := freeSlot(rebuilt, &Claim{}, p.Device.GPUUUID, max(p.Device.MaxClaims, d.gpus[gpu.UUID(p.Device.GPUUUID)].MaxClaims))
		var sh Share
		if err == nil {
			sh, err = d.makeShare(l.r, p.Device, slot)
		}
		if err != nil {
			d.log.Error("a claim's share cannot be rebuilt: left out of the rebuilt checkpoint",
				"claim", c.Namespace+"/"+c.Name, "uid", c.UID, "device", l.r.Device, "err", err)
			continue
		}
		p.Share = &sh
	}
	// A share that found no index is left out; so is a claim left empty.
	for uid, c := range rebuilt {
		c.Devices = slices.DeleteFunc(c.Devices, func(p Prepared) bool { return p.Device.Sized && p.Share == nil })
		if len(c.Devices) == 0 {
			delete(rebuilt, uid)
			continue
		}
		rebuilt[uid] = c
	}
	if err := saveCheckpoint(d.opts.CheckpointPath, rebuilt); err != nil {
		return fmt.Errorf("rebuilding the DRA checkpoint: %w", err)
	}
	// The marker goes only now: a crash before this rebuilds again, which
	// finds the same claims.
	if err := rebuildDone(d.opts.CheckpointPath); err != nil {
		return fmt.Errorf("rebuilding the DRA checkpoint: %w", err)
	}
	d.claims, d.rebuild = rebuilt, nil
	d.log.Warn("the DRA checkpoint rebuilt from the API server's claims", "claims", len(rebuilt), "path", d.opts.CheckpointPath)
	if err := d.syncSpecLocked(); err != nil {
		d.log.Error("the claims' CDI spec not written after the rebuild; the next prepare or reconcile does", "err", err)
	}
	return nil
}

// listClaims lists every ResourceClaim, a page at a time.
func (d *Driver) listClaims(ctx context.Context) ([]resourceapi.ResourceClaim, error) {
	var out []resourceapi.ResourceClaim
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := d.client.ResourceV1().ResourceClaims("").List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing ResourceClaims: %w", err)
		}
		out = append(out, list.Items...)
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}

// listPublished reads back the devices of the node's pool as its
// ResourceSlices have them (a previous run published them), by name.
func (d *Driver) listPublished(ctx context.Context) (map[string]Device, error) {
	list, err := d.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + d.opts.DriverName})
	if err != nil {
		return nil, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	out := map[string]Device{}
	for _, s := range list.Items {
		if s.Spec.Pool.Name != d.Pool() {
			continue
		}
		for _, dv := range s.Spec.Devices {
			if dev, ok := deviceFromSlice(dv); ok {
				out[dev.Name] = dev
			}
		}
	}
	return out, nil
}

// deviceFromSlice reads a published device back (sliceDevice's inverse).
func deviceFromSlice(dv resourceapi.Device) (Device, bool) {
	str := func(n resourceapi.QualifiedName) string {
		if v := dv.Attributes[n].StringValue; v != nil {
			return *v
		}
		return ""
	}
	dev := Device{Name: dv.Name, GPUUUID: str(AttrUUID), GPUAddr: str(AttrPCIAddress), ProductName: str(AttrProductName), Healthy: len(dv.Taints) == 0}
	if dev.GPUUUID == "" {
		return Device{}, false
	}
	mem, threads := dv.Capacity[CapMemory].Value, dv.Capacity[CapThreads].Value
	dev.MemoryLimit, dev.ThreadPercentage = units.MiB(mem.Value()>>20), int(threads.Value())
	if v := dv.Attributes[AttrSized].BoolValue; v != nil && *v {
		n := dv.Capacity[CapClaims].Value
		dev.Sized, dev.MaxClaims = true, int(n.Value())
		return dev, true
	}
	v := dv.Attributes[AttrIndex].IntValue
	if v == nil {
		return Device{}, false
	}
	dev.Index = int(*v)
	dev.CDIName = cdi.QualifiedName(cdi.DefaultKind, vdev.NameOf(gpu.UUID(dev.GPUUUID), dev.Index).String())
	return dev, true
}

// specIndexes reads the claims' spec the previous run wrote: each share
// ID's entry names its device in its environment (vdev.EnvVar).
// Unreadable or missing, it is no help, not an error.
func (d *Driver) specIndexes() map[types.UID]int {
	out := map[types.UID]int{}
	if d.spec == nil {
		return out
	}
	o := d.spec.CDI
	o.Kind = d.opts.ClaimKind
	path, err := cdi.SpecPath(o)
	if err != nil {
		return out
	}
	s, err := cdiapi.ReadSpec(path, 0)
	if err != nil {
		d.log.Warn("the claims' CDI spec of the previous run is unreadable: rebuilt shares get new indexes", "path", path, "err", err)
		return out
	}
	for _, dv := range s.Devices {
		for _, e := range dv.ContainerEdits.Env {
			if v, ok := strings.CutPrefix(e, vdev.EnvVar+"="); ok {
				if _, i, err := vdev.ParseName(v); err == nil && v != dv.Name {
					out[types.UID(dv.Name)] = i
				}
			}
		}
	}
	return out
}
