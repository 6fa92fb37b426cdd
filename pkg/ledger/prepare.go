package ledger

import (
	"fmt"
	"slices"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/units"
)

// Allocation is a claim as the scheduler allocated it, in the ledger's
// terms (pkg/dra reads it from a ResourceClaim).
type Allocation struct {
	UID, Namespace, Name string
	// Allocated is false for a claim the scheduler has not allocated.
	Allocated bool
	// Reserved: a pod reserves it (its containers may run).
	Reserved bool
	// Results are its devices of this driver, in the allocation's order.
	Results []Result
}

// Result is one device a claim was allocated.
type Result struct {
	Request, Pool, Device string
	// ShareID is the allocation's share of a claims device ("" when it
	// records none).
	ShareID string
	// Memory and Threads are what a share of a claims device consumed
	// (memory in whole MiB, rounded down); MemoryRecorded is false when the
	// allocation records no memory consumed.
	Memory         units.MiB
	MemoryRecorded bool
	Threads        int
	// Refused says why its request may not be prepared whatever the pool
	// holds (a size of 0 or less asked for); "" when it may.
	Refused string
}

// Name is the claim's namespace/name.
func (a Allocation) name() string { return a.Namespace + "/" + a.Name }

// PrepareResult is a claim's outcome: its devices, or why it was not
// prepared.
type PrepareResult struct {
	Claim Claim
	Err   error
}

// Prepare prepares claims: each device is checked against the pool (a
// fixed slice held by another claim, a device the pool does not publish or
// whose GPU is unhealthy, a claims device with no room fail that claim),
// each share of a claims device gets a device of its own, whose CDI entry
// (and identity file) is written, as is the checkpoint, before Prepare
// returns. A claim prepared already is answered as it was (the kubelet
// repeats itself after its restarts). The error is for the whole call: the
// claims' spec or the checkpoint could not be written, nothing is kept.
func (l *Ledger) Prepare(claims []Allocation) (map[string]PrepareResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]PrepareResult, len(claims))
	var added []string
	owns := false
	for _, c := range claims {
		if prev, ok := l.claims[c.UID]; ok {
			out[c.UID] = PrepareResult{Claim: prev}
			continue
		}
		prepared, err := l.prepare(c)
		if err != nil {
			l.log.Warn("claim not prepared", "claim", c.name(), "uid", c.UID, "err", err)
			out[c.UID] = PrepareResult{Err: err}
			continue
		}
		l.claims[c.UID] = prepared
		added = append(added, c.UID)
		out[c.UID] = PrepareResult{Claim: prepared}
		owns = owns || hasOwn(prepared)
	}
	if len(added) == 0 {
		return out, nil
	}
	undo := func() {
		for _, uid := range added {
			delete(l.claims, uid)
		}
		if owns {
			if err := l.syncSpecLocked(); err != nil {
				l.log.Error("the claims' CDI spec not written back after a failed prepare; the next prepare or reconcile does", "err", err)
			}
		}
	}
	// The CDI entries first: the runtime gets their names as soon as the
	// kubelet has the answer.
	if owns {
		if err := l.syncSpecLocked(); err != nil {
			undo()
			return nil, err
		}
	}
	if err := saveCheckpoint(l.opts.CheckpointPath, l.claims); err != nil {
		// Not recorded, so not handed out: the kubelet asks again.
		undo()
		return nil, err
	}
	for _, uid := range added {
		c := l.claims[uid]
		l.log.Info("claim prepared", "claim", c.Namespace+"/"+c.Name, "uid", uid, "devices", len(c.Devices), "cdi", c.CDINames())
	}
	return out, nil
}

// CDINames are the CDI names of the claim's devices, in order.
func (c Claim) CDINames() []string {
	var out []string
	for _, p := range c.Devices {
		out = append(out, p.CDIName())
	}
	return out
}

// CDIName is the CDI name of the device: the fixed slice's entry in the
// host's spec, or the claim's own device's in the claims' spec.
func (p Prepared) CDIName() string {
	if p.Own != nil {
		return p.Own.CDIName
	}
	return p.Device.CDIName
}

// prepare checks claim c's devices against the pool and gives each share
// of a claims device its own device.
func (l *Ledger) prepare(c Allocation) (Claim, error) {
	if l.rebuild != nil {
		return Claim{}, fmt.Errorf("the DRA checkpoint is being rebuilt from the API server (%v); try again", l.rebuild)
	}
	if !c.Allocated {
		return Claim{}, fmt.Errorf("claim %s is not allocated", c.name())
	}
	offered := map[string]Device{}
	for _, dev := range Published(l.current, l.claims) {
		offered[dev.Name] = dev
	}
	holder := l.holders()
	out := Claim{UID: c.UID, Namespace: c.Namespace, Name: c.Name}
	claimsGPU := map[string]bool{}
	for _, r := range c.Results {
		if r.Pool != l.Pool() {
			return Claim{}, fmt.Errorf("claim %s: device %s is in pool %q, this node's is %q", c.name(), r.Device, r.Pool, l.Pool())
		}
		if h, ok := holder[r.Device]; ok {
			return Claim{}, fmt.Errorf("claim %s: device %s is held by claim %s", c.name(), r.Device, h.UID)
		}
		dev, ok := offered[r.Device]
		if !ok {
			return Claim{}, fmt.Errorf("claim %s: device %s is not offered on this node (removed, resized or switched to claims since it was allocated)", c.name(), r.Device)
		}
		if !dev.Healthy {
			return Claim{}, fmt.Errorf("claim %s: device %s: MPS of GPU %s is not serving (see the daemon's /status); its devices are tainted %s/%s", c.name(), r.Device, dev.GPUUUID, l.opts.Driver, TaintUnhealthy)
		}
		p := Prepared{Request: r.Request, Pool: r.Pool, Device: dev}
		if dev.ClaimsDevice {
			if claimsGPU[dev.GPUUUID] {
				return Claim{}, fmt.Errorf("claim %s: two shares of GPU %s: a container sees one device of each GPU; ask for their sum in one request", c.name(), dev.GPUUUID)
			}
			claimsGPU[dev.GPUUUID] = true
			own, err := l.own(r, dev, l.claims, &out, -1, dev.VirtualNumber)
			if err != nil {
				return Claim{}, fmt.Errorf("claim %s: device %s: %w", c.name(), r.Device, err)
			}
			p.Own = &own
		}
		out.Devices = append(out.Devices, p)
	}
	return out, nil
}

// TaintUnhealthy (in the driver's domain: mps.yunion.io/unhealthy) is the
// taint on the devices of a GPU whose MPS is not serving.
const TaintUnhealthy = "unhealthy"

// own is result r's own device on claims device dev, the one assignment of
// a slot a prepare and a rebuild share: slot when it is one (0 or more) of
// dev's GPU that neither claims nor partial hold, else the lowest such
// below limit; the memory and thread share the allocation consumed; the
// GPU's CDI facts.
func (l *Ledger) own(r Result, dev Device, claims map[string]Claim, partial *Claim, slot, limit int) (ClaimDevice, error) {
	if r.Refused != "" {
		return ClaimDevice{}, fmt.Errorf("request %s asks for %s: want more than 0", r.Request, r.Refused)
	}
	g, known := l.gpus[gpu.UUID(dev.GPUUUID)]
	if !known || l.spec == nil {
		return ClaimDevice{}, fmt.Errorf("GPU %s is not in this daemon's plan yet", dev.GPUUUID)
	}
	if !r.MemoryRecorded {
		return ClaimDevice{}, fmt.Errorf("the allocation records no consumed memory")
	}
	if r.ShareID == "" {
		return ClaimDevice{}, fmt.Errorf("allocated without a share ID: the scheduler does not know consumable capacity (DRAConsumableCapacity)")
	}
	used := usedSlots(claims, partial, dev.GPUUUID)
	if slot < 0 || used[slot] {
		var err error
		if slot, err = freeSlot(used, dev.GPUUUID, limit); err != nil {
			return ClaimDevice{}, err
		}
	}
	cd, err := claim.NewDevice(g.Devices[0], slot, r.Memory, r.Threads)
	if err != nil {
		return ClaimDevice{}, err
	}
	return ClaimDevice{
		ID: r.ShareID, Index: cd.Index, MemoryLimit: cd.MemoryLimit, ThreadPercentage: cd.ThreadPercentage,
		CDIName: cdi.QualifiedName(l.opts.ClaimKind, cd.Name().String()),
		Minor:   cd.GPU.Minor, PipeDir: cd.PipeDir, ClientPriority: cd.ClientPriority,
	}, nil
}

// freeSlot is the lowest slot of GPU uuid below max that used does not
// hold.
func freeSlot(used map[int]bool, uuid string, max int) (int, error) {
	for s := range max {
		if !used[s] {
			return s, nil
		}
	}
	return 0, fmt.Errorf("GPU %s holds %d claims, the most its device takes (virtual_number)", uuid, max)
}

// usedSlots are the slots of GPU uuid that claims' own devices (and
// partial's) hold.
func usedSlots(claims map[string]Claim, partial *Claim, uuid string) map[int]bool {
	used := map[int]bool{}
	mark := func(c Claim) {
		for _, p := range c.Devices {
			if p.Own != nil && p.Device.GPUUUID == uuid {
				if s, ok := claim.IsClaim(p.Own.Index); ok {
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

// Unprepare forgets the claims of uids: their fixed slices are free again
// (published as the plan has them now, or withdrawn when the plan has them
// no more) and their own devices' CDI entries go. A claim not prepared is
// no error. changed says whether any was prepared.
func (l *Ledger) Unprepare(uids []string) (changed bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rebuild != nil {
		return false, fmt.Errorf("the DRA checkpoint is being rebuilt from the API server (%v); try again", l.rebuild)
	}
	var gone []Claim
	for _, uid := range uids {
		if prev, ok := l.claims[uid]; ok {
			gone = append(gone, prev)
			delete(l.claims, uid)
		}
	}
	if len(gone) == 0 {
		return false, nil
	}
	if err := saveCheckpoint(l.opts.CheckpointPath, l.claims); err != nil {
		for _, c := range gone {
			l.claims[c.UID] = c
		}
		return false, err
	}
	if slices.ContainsFunc(gone, hasOwn) {
		// The entries go after the checkpoint: a crash between the two
		// leaves entries of claims no longer prepared, which the next
		// write drops, never a prepared claim without its entry.
		if err := l.syncSpecLocked(); err != nil {
			l.log.Error("the claims' CDI spec not written after an unprepare; the next prepare or reconcile does", "err", err)
		}
	}
	for _, c := range gone {
		l.log.Info("claim unprepared", "claim", c.Namespace+"/"+c.Name, "uid", c.UID)
	}
	return true, nil
}

func hasOwn(c Claim) bool {
	return slices.ContainsFunc(c.Devices, func(p Prepared) bool { return p.Own != nil })
}
