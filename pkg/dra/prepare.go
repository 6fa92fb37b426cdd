package dra

import (
	"context"
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/units"
)

// PrepareResourceClaims is the kubelet's NodePrepareResources: each claim's
// devices of this driver and pool get CDI names: a fixed slice its entry
// in the host's spec, a share of a sized device an entry of its own in the
// claims' spec, written (with its identity file) before the answer, as is
// the checkpoint. A claim prepared already gets the same answer again (the
// kubelet repeats itself after its restarts); a fixed slice held by
// another claim, a device the pool does not publish or whose GPU is
// unhealthy, a share the GPU has no room for, fails that claim.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	var added []types.UID
	shares := false
	for _, c := range claims {
		if prev, ok := d.claims[c.UID]; ok {
			out[c.UID] = resultOf(prev)
			continue
		}
		prepared, err := d.prepare(c)
		if err != nil {
			d.log.Warn("claim not prepared", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "err", err)
			out[c.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		d.claims[c.UID] = prepared
		added = append(added, c.UID)
		out[c.UID] = resultOf(prepared)
		for _, p := range prepared.Devices {
			shares = shares || p.Share != nil
		}
	}
	if len(added) == 0 {
		return out, nil
	}
	undo := func() {
		for _, uid := range added {
			delete(d.claims, uid)
		}
		if shares {
			if err := d.syncSpecLocked(); err != nil {
				d.log.Error("the claims' CDI spec not written back after a failed prepare; the next prepare or reconcile does", "err", err)
			}
		}
	}
	// The CDI entries first: the runtime gets their names as soon as the
	// kubelet has the answer.
	if shares {
		if err := d.syncSpecLocked(); err != nil {
			undo()
			return nil, err
		}
	}
	if err := saveCheckpoint(d.opts.CheckpointPath, d.claims); err != nil {
		// Not recorded, so not handed out: the kubelet asks again.
		undo()
		return nil, err
	}
	for _, uid := range added {
		c := d.claims[uid]
		d.log.Info("claim prepared", "claim", c.Namespace+"/"+c.Name, "uid", uid, "devices", len(c.Devices), "cdi", resultOf(c).Devices)
	}
	return out, nil
}

// prepare checks claim c's devices against the pool and gives each share
// of a sized device its own device.
func (d *Driver) prepare(c *resourceapi.ResourceClaim) (Claim, error) {
	if d.rebuild != nil {
		return Claim{}, fmt.Errorf("the DRA checkpoint is being rebuilt from the API server (%v); try again", d.rebuild)
	}
	if c.Status.Allocation == nil {
		return Claim{}, fmt.Errorf("claim %s/%s is not allocated", c.Namespace, c.Name)
	}
	offered := map[string]Device{}
	for _, dev := range Published(d.current, d.claims) {
		offered[dev.Name] = dev
	}
	holder := d.holders()
	out := Claim{UID: c.UID, Namespace: c.Namespace, Name: c.Name}
	sharedGPU := map[string]bool{}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != d.opts.DriverName {
			continue
		}
		if r.Pool != d.Pool() {
			return Claim{}, fmt.Errorf("claim %s/%s: device %s is in pool %q, this node's is %q", c.Namespace, c.Name, r.Device, r.Pool, d.Pool())
		}
		if h, ok := holder[r.Device]; ok {
			return Claim{}, fmt.Errorf("claim %s/%s: device %s is held by claim %s", c.Namespace, c.Name, r.Device, h.UID)
		}
		dev, ok := offered[r.Device]
		if !ok {
			return Claim{}, fmt.Errorf("claim %s/%s: device %s is not offered on this node (removed, resized or switched to claims since it was allocated)", c.Namespace, c.Name, r.Device)
		}
		if !dev.Healthy {
			return Claim{}, fmt.Errorf("claim %s/%s: device %s: MPS of GPU %s is not serving (see the daemon's /status); its devices are tainted %s/%s", c.Namespace, c.Name, r.Device, dev.GPUUUID, d.opts.DriverName, TaintUnhealthy)
		}
		p := Prepared{Request: r.Request, Pool: r.Pool, Device: dev}
		if dev.Sized {
			if sharedGPU[dev.GPUUUID] {
				return Claim{}, fmt.Errorf("claim %s/%s: two shares of GPU %s: a container sees one device of each GPU; ask for their sum in one request", c.Namespace, c.Name, dev.GPUUUID)
			}
			sharedGPU[dev.GPUUUID] = true
			s, err := d.share(c, r, dev, &out)
			if err != nil {
				return Claim{}, fmt.Errorf("claim %s/%s: device %s: %w", c.Namespace, c.Name, r.Device, err)
			}
			p.Share = &s
		}
		out.Devices = append(out.Devices, p)
	}
	return out, nil
}

// share is result r's own device on sized device dev: the lowest slot of
// its GPU no claim holds (those of c prepared so far included), the
// memory and thread share the allocation consumed, the GPU's CDI facts.
func (d *Driver) share(c *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult, dev Device, partial *Claim) (Share, error) {
	if err := checkRequested(c, r.Request, d.opts.DriverName); err != nil {
		return Share{}, err
	}
	if _, known := d.gpus[gpu.UUID(dev.GPUUUID)]; !known || d.spec == nil {
		return Share{}, fmt.Errorf("GPU %s is not in this daemon's plan yet", dev.GPUUUID)
	}
	if _, ok := r.ConsumedCapacity[CapMemory]; !ok {
		return Share{}, fmt.Errorf("the allocation records no consumed %s", CapMemory)
	}
	slot, err := freeSlot(d.claims, partial, dev.GPUUUID, dev.MaxClaims)
	if err != nil {
		return Share{}, err
	}
	return d.makeShare(r, dev, slot)
}

// makeShare is result r's share on sized device dev in slot: its device
// made from its GPU's (claim.Device) with the memory (whole MiB) and
// thread share the allocation consumed.
func (d *Driver) makeShare(r resourceapi.DeviceRequestAllocationResult, dev Device, slot int) (Share, error) {
	if r.ShareID == nil || *r.ShareID == "" {
		return Share{}, fmt.Errorf("allocated without a share ID: the scheduler does not know consumable capacity (DRAConsumableCapacity)")
	}
	g, known := d.gpus[gpu.UUID(dev.GPUUUID)]
	if !known {
		return Share{}, fmt.Errorf("GPU %s is not in this daemon's plan", dev.GPUUUID)
	}
	memQ, threadsQ := r.ConsumedCapacity[CapMemory], r.ConsumedCapacity[CapThreads]
	cd, err := claim.Device(g.Device, slot, units.MiB(memQ.Value()>>20), int(threadsQ.Value()))
	if err != nil {
		return Share{}, err
	}
	return Share{
		ID: *r.ShareID, Index: cd.Index, MemoryLimit: cd.MemoryLimit, ThreadPercentage: cd.ThreadPercentage,
		CDIName: cdi.QualifiedName(d.opts.ClaimKind, cd.Name().String()),
		Minor:   cd.GPU.Minor, PipeDir: cd.PipeDir, ClientPriority: cd.ClientPriority,
	}, nil
}

// checkRequested refuses a request that names a size of 0 or less: the
// allocator rounds it up to the smallest share (1 MiB) rather than
// refusing it, and a device of that size would be no use to anyone.
// (deploy/kubernetes/claim-validation.yaml has the API server refuse it.)
func checkRequested(c *resourceapi.ResourceClaim, request, driver string) error {
	for _, req := range c.Spec.Devices.Requests {
		var capacity *resourceapi.CapacityRequirements
		if req.Exactly != nil && req.Name == request {
			capacity = req.Exactly.Capacity
		}
		for _, sub := range req.FirstAvailable {
			if req.Name+"/"+sub.Name == request {
				capacity = sub.Capacity
			}
		}
		if capacity == nil {
			continue
		}
		for _, name := range []resourceapi.QualifiedName{CapMemory, CapThreads} {
			for _, key := range []resourceapi.QualifiedName{name, resourceapi.QualifiedName(driver + "/" + string(name))} {
				if q, ok := capacity.Requests[key]; ok && q.Cmp(resource.Quantity{}) <= 0 {
					return fmt.Errorf("request %s asks for %s %s: want more than 0", request, q.String(), name)
				}
			}
		}
	}
	return nil
}

// freeSlot is the lowest slot of GPU uuid below max that none of claims'
// shares (nor partial's) holds.
func freeSlot(claims map[types.UID]Claim, partial *Claim, uuid string, max int) (int, error) {
	used := usedSlots(claims, partial, uuid)
	for s := range max {
		if !used[s] {
			return s, nil
		}
	}
	return 0, fmt.Errorf("GPU %s holds %d claims, the most its device takes (virtual_number)", uuid, max)
}

// usedSlots are the slots of GPU uuid that claims' shares (and partial's)
// hold.
func usedSlots(claims map[types.UID]Claim, partial *Claim, uuid string) map[int]bool {
	used := map[int]bool{}
	mark := func(c Claim) {
		for _, p := range c.Devices {
			if p.Share != nil && p.Device.GPUUUID == uuid {
				if s, ok := claim.IsClaim(p.Share.Index); ok {
					used[s] = true
				}
			}
		}
	}
	for _, c := range claims {
		mark(c)
	}
	mark(*partial)
	return used
}

func resultOf(c Claim) kubeletplugin.PrepareResult {
	var res kubeletplugin.PrepareResult
	for _, p := range c.Devices {
		dev := kubeletplugin.Device{
			Requests: []string{p.Request}, PoolName: p.Pool, DeviceName: p.Device.Name,
			CDIDeviceIDs: []string{p.Device.CDIName},
		}
		if s := p.Share; s != nil {
			dev.CDIDeviceIDs, dev.ShareID = []string{s.CDIName}, &s.ID
		}
		res.Devices = append(res.Devices, dev)
	}
	return res
}

// UnprepareResourceClaims is the kubelet's NodeUnprepareResources: the
// claims' fixed slices are free again (published as the plan has them
// now, or withdrawn when the plan has them no more) and their shares'
// CDI entries are gone. A claim not prepared is no error.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.rebuild != nil {
		return nil, fmt.Errorf("the DRA checkpoint is being rebuilt from the API server (%v); try again", d.rebuild)
	}
	out := make(map[types.UID]error, len(claims))
	var gone []Claim
	for _, c := range claims {
		out[c.UID] = nil
		if prev, ok := d.claims[c.UID]; ok {
			gone = append(gone, prev)
			delete(d.claims, c.UID)
		}
	}
	if len(gone) == 0 {
		return out, nil
	}
	if err := saveCheckpoint(d.opts.CheckpointPath, d.claims); err != nil {
		for _, c := range gone {
			d.claims[c.UID] = c
		}
		return nil, err
	}
	if slices.ContainsFunc(gone, hasShares) {
		// The entries go after the checkpoint: a crash between the two
		// leaves entries of claims no longer prepared, which the next
		// write drops, never a prepared claim without its entry.
		if err := d.syncSpecLocked(); err != nil {
			d.log.Error("the claims' CDI spec not written after an unprepare; the next prepare or reconcile does", "err", err)
		}
	}
	for _, c := range gone {
		d.log.Info("claim unprepared", "claim", c.Namespace+"/"+c.Name, "uid", c.UID)
	}
	d.publishLocked(false) // in the background: the kubelet need not wait
	return out, nil
}

func hasShares(c Claim) bool {
	return slices.ContainsFunc(c.Devices, func(p Prepared) bool { return p.Share != nil })
}
