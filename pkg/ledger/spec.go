package ledger

import (
	"cmp"
	"slices"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// syncSpecLocked makes the claims' CDI spec hold every prepared claim's
// own device's entry (pkg/claim), each made as a virtual device's is
// (pkg/cdi) from its GPU as the agent last described it, with the claim's
// caps: the second name of each is its share ID. Nothing is written before
// the agent has said where (Sync).
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
	path, changed, err := l.spec.Sync(&l.specW, l.opts.ClaimKind, devs)
	if err != nil {
		return err
	}
	if changed {
		l.log.Info("the claims' CDI spec written", "path", path, "claims", len(devs))
	}
	return nil
}

// ownDevice is own device s on GPU uuid as its CDI entry is made: the GPU
// and its pipe directory as the agent last described them, or, for a GPU
// it no longer describes, as s recorded them when it was prepared; the
// caps and priority the claim's.
func (l *Ledger) ownDevice(uuid string, s ClaimDevice) cdi.Device {
	base, known := l.gpus[gpu.UUID(uuid)]
	dev := base.Device
	if !known {
		dev = cdi.Device{Device: vdev.Device{GPU: gpu.Info{UUID: gpu.UUID(uuid), Minor: s.Minor, Index: -1}},
			PipeDir: s.PipeDir, ClientPriority: s.ClientPriority}
	}
	// The caps and priority are the claim's, as prepared: never changed
	// under its containers.
	dev.Index, dev.MemoryLimit, dev.ThreadPercentage = s.Index, s.MemoryLimit, s.ThreadPercentage
	dev.Class, dev.ClientPriority, dev.ID, dev.IdentityFile, dev.ViewDir = vdev.ClassShared, s.ClientPriority, s.ID, "", ""
	return dev
}
