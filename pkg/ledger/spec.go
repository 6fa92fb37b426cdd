package ledger

import (
	"cmp"
	"fmt"
	"slices"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// syncSpecLocked makes the claims' CDI spec hold every prepared claim's
// own device's entry (pkg/claim), each made as a virtual device's is, by
// the one entries step (pkg/entries: identity file, view, CDI entry), from
// its GPU as the agent last offered it, with the claim's caps: the second
// name of each is its share ID. The views of claims no longer prepared go
// once no container holds them; views that cannot be made leave the
// entries without the view (their containers see the whole GPU, the caps
// hold as ever), said in the log. Nothing is written before the agent has
// said where (Sync).
func (l *Ledger) syncSpecLocked() error {
	if l.spec == nil {
		return nil
	}
	var devs []cdi.Device
	for _, c := range l.claims {
		for _, p := range c.Devices {
			if p.Own != nil {
				devs = append(devs, l.ownDevice(p.Device.GPUUUID, *p.Own))
			}
		}
	}
	slices.SortFunc(devs, func(a, b cdi.Device) int { return cmp.Compare(a.Name(), b.Name()) })
	spec := *l.spec
	spec.CDI.Kind = l.opts.ClaimKind
	res, err := spec.SyncClaims(&l.specW, devs)
	if res.Pruned.Err != nil {
		l.log.Warn("views of claims no longer prepared kept", "err", res.Pruned.Err)
	}
	if res.ViewErr != nil {
		l.log.Error("claims' views not written; their containers see the whole GPU (caps hold as ever)", "err", res.ViewErr)
	}
	if err != nil {
		return fmt.Errorf("the claims' entries: %w", err)
	}
	if res.Changed {
		l.log.Info("the claims' CDI spec written", "path", res.Path, "claims", len(devs))
	}
	return nil
}

// ownDevice is own device s on GPU uuid as its CDI entry is made: the GPU
// and its pipe directory as the agent last offered them, or, for a GPU
// it no longer offers, as s recorded them when it was prepared; the caps
// and priority the claim's.
func (l *Ledger) ownDevice(uuid string, s ClaimDevice) cdi.Device {
	base, known := l.gpus[gpu.UUID(uuid)]
	var dev cdi.Device
	if known {
		dev = base.Devices[0]
	} else {
		dev = cdi.Device{Device: vdev.Device{GPU: gpu.Info{UUID: gpu.UUID(uuid), Minor: s.Minor, Index: -1}},
			PipeDir: s.PipeDir, ClientPriority: s.ClientPriority}
	}
	// The caps and priority are the claim's, as prepared: never changed
	// under its containers.
	dev.Index, dev.MemoryLimit, dev.ThreadPercentage = s.Index, s.MemoryLimit, s.ThreadPercentage
	dev.Class, dev.ClientPriority, dev.ID, dev.IdentityFile, dev.ViewDir = vdev.ClassShared, s.ClientPriority, s.ID, "", ""
	return dev
}
