package dra

import (
	"cmp"
	"slices"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// syncSpecLocked makes the claims' CDI spec hold every prepared share's
// entry (pkg/claim), each made as a virtual device's is (pkg/cdi) from its
// GPU as the agent last described it, with the share's caps: the second
// name of each is its share ID. Nothing is written before the agent has
// said where (SetGPUs).
func (d *Driver) syncSpecLocked() error {
	if d.spec == nil {
		return nil
	}
	var devs []cdi.Device
	for _, c := range d.claims {
		for _, p := range c.Devices {
			if p.Share != nil {
				devs = append(devs, d.shareDevice(p.Device.GPUUUID, *p.Share))
			}
		}
	}
	slices.SortFunc(devs, func(a, b cdi.Device) int { return cmp.Compare(a.Name(), b.Name()) })
	path, changed, err := d.spec.Sync(&d.specW, d.opts.ClaimKind, devs)
	if err != nil {
		return err
	}
	if changed {
		d.log.Info("the claims' CDI spec written", "path", path, "claims", len(devs))
	}
	return nil
}

// shareDevice is share s's device on GPU uuid as its CDI entry is made:
// the GPU and its pipe directory as the agent last described them, or,
// for a GPU it no longer describes, as the share recorded them when it was
// prepared; the caps and priority the share's.
func (d *Driver) shareDevice(uuid string, s Share) cdi.Device {
	base, known := d.gpus[gpu.UUID(uuid)]
	dev := base.Device
	if !known {
		dev = cdi.Device{Device: vdev.Device{GPU: gpu.Info{UUID: gpu.UUID(uuid), Minor: s.Minor, Index: -1}},
			PipeDir: s.PipeDir, ClientPriority: s.ClientPriority}
	}
	// The caps and priority are the claim's, as prepared: never changed
	// under its containers.
	dev.Index, dev.MemoryLimit, dev.ThreadPercentage = s.Index, s.MemoryLimit, s.ThreadPercentage
	dev.Class, dev.ClientPriority, dev.ID, dev.IdentityFile, dev.ViewDir = vdev.ClassShared, s.ClientPriority, string(s.ID), "", ""
	return dev
}
