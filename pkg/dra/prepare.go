package dra

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"yunion.io/x/mps-daemon/pkg/ledger"
	"yunion.io/x/mps-daemon/pkg/units"
)

// PrepareResourceClaims is the kubelet's NodePrepareResources: each
// claim's devices of this driver get CDI names, as the ledger prepares
// them (ledger.Prepare): a fixed slice its entry in the host's spec, a
// share of a claims device an entry of its own in the claims' spec,
// written (with its identity file) before the answer, as is the
// checkpoint.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	allocs := make([]ledger.Allocation, len(claims))
	for i, c := range claims {
		allocs[i] = d.allocationOf(c)
	}
	res, err := d.ledger.Prepare(allocs)
	if err != nil {
		return nil, err
	}
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(res))
	added := false
	for uid, r := range res {
		if r.Err != nil {
			out[types.UID(uid)] = kubeletplugin.PrepareResult{Err: r.Err}
			continue
		}
		out[types.UID(uid)] = resultOf(r.Claim)
		added = true
	}
	if added {
		d.noteChanged()
	}
	return out, nil
}

// allocationOf is claim c in the ledger's terms: its results of this
// driver, with what a share of a claims device consumed, and why a
// request asking for a size of 0 or less is refused: the allocator rounds
// it up to the smallest share (1 MiB) rather than refusing it, and a
// device of that size would be no use to anyone
// (deploy/kubernetes/claim-validation.yaml has the API server refuse it).
func (d *Driver) allocationOf(c *resourceapi.ResourceClaim) ledger.Allocation {
	a := ledger.Allocation{UID: string(c.UID), Namespace: c.Namespace, Name: c.Name,
		Allocated: c.Status.Allocation != nil, Reserved: len(c.Status.ReservedFor) > 0}
	if c.Status.Allocation == nil {
		return a
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != d.opts.DriverName {
			continue
		}
		res := ledger.Result{Request: r.Request, Pool: r.Pool, Device: r.Device, Refused: refused(c, r.Request, d.opts.DriverName)}
		if r.ShareID != nil {
			res.ShareID = string(*r.ShareID)
		}
		if q, ok := r.ConsumedCapacity[CapMemory]; ok {
			res.Memory, res.MemoryRecorded = units.MiB(q.Value()>>20), true
		}
		threads := r.ConsumedCapacity[CapThreads]
		res.Threads = int(threads.Value())
		a.Results = append(a.Results, res)
	}
	return a
}

// refused is what request asks for of memory or threads when it is 0 or
// less ("0 memory"), "" otherwise.
func refused(c *resourceapi.ResourceClaim, request, driver string) string {
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
					return q.String() + " " + string(name)
				}
			}
		}
	}
	return ""
}

func resultOf(c ledger.Claim) kubeletplugin.PrepareResult {
	var res kubeletplugin.PrepareResult
	for _, p := range c.Devices {
		dev := kubeletplugin.Device{
			Requests: []string{p.Request}, PoolName: p.Pool, DeviceName: p.Device.Name,
			CDIDeviceIDs: []string{p.CDIName()},
		}
		if s := p.Own; s != nil {
			share := types.UID(s.ID)
			dev.ShareID = &share
		}
		res.Devices = append(res.Devices, dev)
	}
	return res
}

// UnprepareResourceClaims is the kubelet's NodeUnprepareResources: the
// claims' fixed slices are free again (published as the plan has them
// now, or withdrawn when the plan has them no more) and their own
// devices' CDI entries are gone. A claim not prepared is no error.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	uids := make([]string, len(claims))
	out := make(map[types.UID]error, len(claims))
	for i, c := range claims {
		uids[i], out[c.UID] = string(c.UID), nil
	}
	changed, err := d.ledger.Unprepare(uids)
	if err != nil {
		return nil, err
	}
	if changed {
		d.noteChanged()
		d.publish(false) // in the background: the kubelet need not wait
	}
	return out, nil
}
