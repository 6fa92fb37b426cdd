package ledger

import (
	"strconv"
	"strings"

	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// Compatibility spellings. A GPU shared by claims of any size (the device
// YAML's sharing: claims) was first called "sized", and four spellings of
// that name stay because something outside this process holds them; each
// may go only when nothing written before its change is left:
//   - the device attribute "sized" (dra.AttrSized): the DeviceClasses of
//     deploy/kubernetes select by it, and so may the classes a cluster
//     made from them. It may go one release after those classes select by
//     dra.AttrSharing and the release notes said so.
//   - the checkpoint's "sized" and "maxClaims" (Device.ClaimsDevice and
//     Device.VirtualNumber's JSON names): checkpoints written by earlier
//     versions, read back after an upgrade. They may go with a checkpoint
//     version 3 that still reads version 2.
//   - the device name's suffix "-sized" (ClaimsDeviceName): claims
//     allocated before an upgrade name the device by it, and a renamed
//     device would leave them naming one that is not published. It may go
//     only on a node drained of such claims (a new driver name, say).
//   - the DeviceClass sized.mps.yunion.io (deploy/kubernetes): claims and
//     workloads name it. It may go when a class of the new name has been
//     shipped beside it for a release, and no claim names the old one.
// Everything else says claims: backend.GPU.Sharing, config.SharingClaims,
// the attribute dra.AttrSharing, the capacity "claims".

// claimsSuffix ends the name of a GPU's claims device (a compatibility
// spelling, above).
const claimsSuffix = "-sized"

// Device is one published device as the plugin knows it: a fixed slice
// (as the agent's reconcile offered it: the same plan, caps and CDI name
// the Cloudpods path uses), or the one device of a GPU shared by claims of
// any size (ClaimsDevice), under its Kubernetes name. The JSON names are
// the checkpoint's.
type Device struct {
	// Name is the device's name in the ResourceSlice (a DNS label).
	Name string `json:"name"`
	// GPUUUID and Index name the virtual device as the plan does
	// (<GPU UUID>::<index>); a claims device's Index is its GPU's one
	// planned device's (0).
	GPUUUID string `json:"gpuUUID"`
	// GPUAddr is the GPU's PCI address as the inventory writes it
	// ("1a:00.0", pci.Address.Short).
	GPUAddr     string    `json:"gpuAddr"`
	Index       int       `json:"index"`
	ProductName string    `json:"productName"`
	MemoryLimit units.MiB `json:"memoryLimitMiB"`
	// ThreadPercentage is the device's active thread percentage.
	ThreadPercentage int `json:"threadPercentage"`
	// CDIName is the qualified CDI device name in the host's spec; a
	// claims device has none (each claim gets its own).
	CDIName string `json:"cdiName,omitempty"`
	Healthy bool   `json:"healthy"`
	// ClaimsDevice: the GPU's one device that claims of any size share
	// (the device YAML's sharing: claims), each consuming its memory,
	// thread share and one of VirtualNumber. ("sized": a compatibility
	// spelling, above.)
	ClaimsDevice bool `json:"sized,omitempty"`
	// VirtualNumber is the entry's virtual_number: how many claims the
	// claims device takes at once.
	VirtualNumber int `json:"maxClaims,omitempty"`
}

// deviceOf is an offered device of a GPU that is healthy or not: a fixed
// slice, or, of a GPU shared by claims, the device its claims device is
// made of (claimsDevice).
func deviceOf(d cdi.Device, healthy bool) Device {
	return Device{
		Name:             DeviceName(d.GPU.UUID.String(), d.Index),
		GPUUUID:          d.GPU.UUID.String(),
		GPUAddr:          d.GPU.PCI.Short(),
		Index:            d.Index,
		ProductName:      d.GPU.Name,
		MemoryLimit:      d.MemoryLimit,
		ThreadPercentage: d.ThreadPercentage,
		CDIName:          cdi.DeviceName(d.Name()),
		Healthy:          healthy,
	}
}

// claimsDevice is the device (the whole GPU, its one planned device) as
// the GPU's claims device taking virtualNumber claims.
func (d Device) claimsDevice(virtualNumber int) Device {
	d.Name = ClaimsDeviceName(d.GPUUUID)
	d.CDIName, d.ClaimsDevice, d.VirtualNumber = "", true, virtualNumber
	return d
}

// vdevName is the device's name as the plan names it: <GPU UUID>::<index>.
func (d Device) vdevName() vdev.Name { return vdev.NameOf(gpu.UUID(d.GPUUUID), d.Index) }

// holding is the device as the agent is answered it: held by holder (a
// claim's UID) when not empty. The id stays empty: the agent would make a
// non-empty one a second CDI name, and the CDI spec takes inventory UUIDs
// only.
func (d Device) holding(holder string, pendingRemoval bool) backend.Holding {
	return backend.Holding{
		Name: d.vdevName(), Holder: holder, Healthy: d.Healthy, PendingRemoval: pendingRemoval, CDIName: d.CDIName,
		MemoryLimit: d.MemoryLimit, ThreadPercentage: d.ThreadPercentage,
	}
}

// DeviceName is the ResourceSlice name of slice index of the GPU with this
// UUID: lower case, every character but a letter or digit a dash, at most
// 63 characters (a DNS label), e.g. gpu-81df1fb7-...-0456642-3.
func DeviceName(gpuUUID string, index int) string {
	return label(gpuUUID, "-"+strconv.Itoa(index))
}

// ClaimsDeviceName is the ResourceSlice name of the claims device of the
// GPU with this UUID: gpu-81df1fb7-...-0456642-sized.
func ClaimsDeviceName(gpuUUID string) string { return label(gpuUUID, claimsSuffix) }

func label(gpuUUID, suffix string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(gpuUUID) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	s := strings.Trim(b.String(), "-")
	if max := 63 - len(suffix); len(s) > max {
		s = strings.TrimRight(s[:max], "-")
	}
	return s + suffix
}
