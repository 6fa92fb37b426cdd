package dra

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/ledger"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// The names a DeviceClass or a claim's CEL selector reads, in the driver's
// domain: device.attributes["mps.yunion.io"].uuid,
// device.capacity["mps.yunion.io"].memory.
const (
	AttrUUID          = "uuid"
	AttrProductName   = "productName"
	AttrIndex         = "index"
	AttrDriverVersion = "driverVersion"
	// AttrSharing is how the device's GPU is shared, the device YAML's
	// sharing (config.Sharing): "slices" or "claims".
	AttrSharing = "sharing"
	// AttrSized is true on a GPU's claims device (sharing "claims"), false
	// on a fixed slice: a compatibility spelling (pkg/ledger's device.go
	// lists them, and when each may go), which the DeviceClasses of
	// deploy/kubernetes select by.
	AttrSized = "sized"
	// AttrPCIAddress is the GPU's PCI address as the inventory writes it
	// ("1a:00.0"): what a rebuilt checkpoint reads a held device back with.
	AttrPCIAddress = "pciAddress"
	CapMemory      = "memory"
	CapThreads     = "threadPercentage"
	// CapVirtualNumber is the capacity "claims" of a claims device: its
	// virtual_number, how many claims it takes at once; each consumes one.
	CapVirtualNumber = "claims"
	// TaintUnhealthy (in the driver's domain: mps.yunion.io/unhealthy) is
	// the taint on the devices of a GPU whose MPS is not serving.
	TaintUnhealthy = ledger.TaintUnhealthy
)

// sliceDevice is d as the ResourceSlice publishes it; taint marks a device
// of a GPU whose MPS is not serving (driver is the taint key's domain).
func sliceDevice(d ledger.Device, driver, driverVersion string, taint bool) resourceapi.Device {
	sharing := config.SharingSlices
	if d.ClaimsDevice {
		sharing = config.SharingClaims
	}
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrUUID:        {StringValue: ptr.To(d.GPUUUID)},
		AttrProductName: {StringValue: ptr.To(d.ProductName)},
		AttrSharing:     {StringValue: ptr.To(string(sharing))},
		AttrSized:       {BoolValue: ptr.To(d.ClaimsDevice)},
	}
	if d.GPUAddr != "" {
		attrs[AttrPCIAddress] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.GPUAddr)}
	}
	if !d.ClaimsDevice {
		attrs[AttrIndex] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(d.Index))}
	}
	if driverVersion != "" {
		attrs[AttrDriverVersion] = resourceapi.DeviceAttribute{StringValue: ptr.To(driverVersion)}
	}
	memory := *resource.NewQuantity(int64(d.MemoryLimit.Bytes()), resource.BinarySI)
	threads := *resource.NewQuantity(int64(d.ThreadPercentage), resource.DecimalSI)
	out := resourceapi.Device{
		Name:       d.Name,
		Attributes: attrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapMemory:  {Value: memory},
			CapThreads: {Value: threads},
		},
	}
	if d.ClaimsDevice {
		out.AllowMultipleAllocations = ptr.To(true)
		out.Capacity = claimsCapacity(memory, threads, d.VirtualNumber)
	}
	if taint {
		out.Taints = []resourceapi.DeviceTaint{{
			Key: driver + "/" + TaintUnhealthy, Value: "mps-not-serving", Effect: resourceapi.DeviceTaintEffectNoSchedule,
		}}
	}
	return out
}

// claimsCapacity is what claims of a claims device consume (DRA
// consumable capacity): memory in whole MiB (a request is rounded up to
// the next MiB), up to the whole GPU, which a claim that names no memory
// gets; thread share from 1 to the GPU's, none by default (its clients
// then get the GPU's default share, competing with the others'); and one
// of the device's claims each, so no more than virtualNumber claims share
// it.
func claimsCapacity(memory, threads resource.Quantity, virtualNumber int) map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
	mib := func() *resource.Quantity { return resource.NewQuantity(1<<20, resource.BinarySI) }
	n := func(v int64) *resource.Quantity { return resource.NewQuantity(v, resource.DecimalSI) }
	return map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		CapMemory: {Value: memory, RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default:    ptr.To(memory.DeepCopy()),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: mib(), Max: ptr.To(memory.DeepCopy()), Step: mib()},
		}},
		CapThreads: {Value: threads, RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default:    n(0),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: n(0), Max: ptr.To(threads.DeepCopy()), Step: n(1)},
		}},
		CapVirtualNumber: {Value: *n(int64(virtualNumber)), RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default:     n(1),
			ValidValues: []resource.Quantity{*n(1)},
		}},
	}
}

// deviceFromSlice reads a published device back: sliceDevice's inverse,
// the other half of the one translation between the ledger's devices and
// ResourceSlices (a previous run's claims device is read by its sized
// attribute, which every version publishes).
func deviceFromSlice(dv resourceapi.Device) (ledger.Device, bool) {
	str := func(n resourceapi.QualifiedName) string {
		if v := dv.Attributes[n].StringValue; v != nil {
			return *v
		}
		return ""
	}
	dev := ledger.Device{Name: dv.Name, GPUUUID: str(AttrUUID), GPUAddr: str(AttrPCIAddress), ProductName: str(AttrProductName), Healthy: len(dv.Taints) == 0}
	if dev.GPUUUID == "" {
		return ledger.Device{}, false
	}
	mem, threads := dv.Capacity[CapMemory].Value, dv.Capacity[CapThreads].Value
	dev.MemoryLimit, dev.ThreadPercentage = units.MiB(mem.Value()>>20), int(threads.Value())
	if v := dv.Attributes[AttrSized].BoolValue; v != nil && *v {
		n := dv.Capacity[CapVirtualNumber].Value
		dev.ClaimsDevice, dev.VirtualNumber = true, int(n.Value())
		return dev, true
	}
	v := dv.Attributes[AttrIndex].IntValue
	if v == nil {
		return ledger.Device{}, false
	}
	dev.Index = int(*v)
	dev.CDIName = cdi.DeviceName(vdev.NameOf(gpu.UUID(dev.GPUUUID), dev.Index))
	return dev, true
}
