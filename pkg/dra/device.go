package dra

import (
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/units"
)

// The names a DeviceClass or a claim's CEL selector reads, in the driver's
// domain: device.attributes["mps.yunion.io"].uuid,
// device.capacity["mps.yunion.io"].memory.
const (
	AttrUUID          = "uuid"
	AttrProductName   = "productName"
	AttrIndex         = "index"
	AttrSharing       = "sharing"
	AttrDriverVersion = "driverVersion"
	// AttrSized is true on a GPU's device that claims of any size share
	// (sharing: claims), false on a fixed slice.
	AttrSized = "sized"
	// AttrPCIAddress is the GPU's PCI address as the inventory writes it
	// ("1a:00.0"): what a rebuilt checkpoint reads a held device back with.
	AttrPCIAddress = "pciAddress"
	CapMemory      = "memory"
	CapThreads     = "threadPercentage"
	// CapClaims is how many claims a sized device takes at once; each
	// consumes one.
	CapClaims = "claims"
	// SharingMPS is the value of AttrSharing.
	SharingMPS = "mps"
	// TaintUnhealthy (in the driver's domain: mps.yunion.io/unhealthy) is
	// the taint on the devices of a GPU whose MPS is not serving.
	TaintUnhealthy = "unhealthy"
)

// sizedSuffix ends the name of a GPU's sized device.
const sizedSuffix = "-sized"

// Device is one published device as the plugin knows it: a fixed slice
// (what the agent's reconcile handed over: one inventory row, the same
// plan, caps and CDI name the Cloudpods path uses), or the one device of a
// GPU shared by claims of any size (Sized), under its Kubernetes name.
type Device struct {
	// Name is the device's name in the ResourceSlice (a DNS label).
	Name string `json:"name"`
	// GPUUUID and Index name the virtual device as the plan does
	// (<GPU UUID>::<index>); a sized device's Index is its GPU's one
	// planned device's (0).
	GPUUUID string `json:"gpuUUID"`
	// GPUAddr is the GPU's PCI address as the agent's row carries it.
	GPUAddr     string    `json:"gpuAddr"`
	Index       int       `json:"index"`
	ProductName string    `json:"productName"`
	MemoryLimit units.MiB `json:"memoryLimitMiB"`
	// ThreadPercentage is the device's active thread percentage.
	ThreadPercentage int `json:"threadPercentage"`
	// CDIName is the qualified CDI device name in the host's spec; a
	// sized device has none (each claim gets its own).
	CDIName string `json:"cdiName,omitempty"`
	Healthy bool   `json:"healthy"`
	// Sized: the GPU's one device that claims of any size share, each
	// consuming its memory, thread share and one of MaxClaims.
	Sized     bool `json:"sized,omitempty"`
	MaxClaims int  `json:"maxClaims,omitempty"`
}

// deviceOf reads the agent's row of a virtual device; ok is false for a row
// that is not a slice of a GPU.
func deviceOf(r api.IsolatedDevice) (Device, bool) {
	addr, i, ok := api.ParseSliceAddr(r.Addr)
	if !ok || r.DevicePath == "" || r.CDIName == "" {
		return Device{}, false
	}
	return Device{
		Name:             DeviceName(r.DevicePath, i),
		GPUUUID:          r.DevicePath,
		GPUAddr:          addr,
		Index:            i,
		ProductName:      r.Model,
		MemoryLimit:      units.MiB(r.MPSMemoryLimit),
		ThreadPercentage: r.MPSThreadPercentage,
		CDIName:          r.CDIName,
		Healthy:          !r.Unhealthy,
	}, true
}

// sized is the row's device (the whole GPU, its one planned device) as
// the GPU's sized device taking maxClaims claims.
func (d Device) sized(maxClaims int) Device {
	d.Name = SizedDeviceName(d.GPUUUID)
	d.CDIName, d.Sized, d.MaxClaims = "", true, maxClaims
	return d
}

// row is the device as a row again, for the agent: held by guest (a claim
// UID) when not empty. The id stays empty: the agent would make a non-empty
// one a second CDI name, and the CDI spec takes inventory UUIDs only.
func (d Device) row(hostID, guest string, pendingRemoval bool) api.IsolatedDevice {
	return api.IsolatedDevice{
		HostID:              hostID,
		DevType:             api.DevTypeNvidiaMPS,
		Model:               d.ProductName,
		Addr:                api.SliceAddr(d.GPUAddr, d.Index),
		DevicePath:          d.GPUUUID,
		Index:               -1,
		DeviceMinor:         -1,
		MPSMemoryLimit:      int(d.MemoryLimit),
		MPSThreadPercentage: d.ThreadPercentage,
		GuestID:             guest,
		Unhealthy:           !d.Healthy,
		PendingRemoval:      pendingRemoval,
		CDIName:             d.CDIName,
	}
}

// DeviceName is the ResourceSlice name of slice index of the GPU with this
// UUID: lower case, every character but a letter or digit a dash, at most
// 63 characters (a DNS label), e.g. gpu-81df1fb7-...-0456642-3.
func DeviceName(gpuUUID string, index int) string {
	return label(gpuUUID, "-"+strconv.Itoa(index))
}

// SizedDeviceName is the ResourceSlice name of the sized device of the GPU
// with this UUID: gpu-81df1fb7-...-0456642-sized.
func SizedDeviceName(gpuUUID string) string { return label(gpuUUID, sizedSuffix) }

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

// sliceDevice is d as the ResourceSlice publishes it; taint marks a device
// of a GPU whose MPS is not serving (driver is the taint key's domain).
func (d Device) sliceDevice(driver, driverVersion string, taint bool) resourceapi.Device {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrUUID:        {StringValue: ptr.To(d.GPUUUID)},
		AttrProductName: {StringValue: ptr.To(d.ProductName)},
		AttrSharing:     {StringValue: ptr.To(SharingMPS)},
		AttrSized:       {BoolValue: ptr.To(d.Sized)},
	}
	if d.GPUAddr != "" {
		attrs[AttrPCIAddress] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.GPUAddr)}
	}
	if !d.Sized {
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
	if d.Sized {
		out.AllowMultipleAllocations = ptr.To(true)
		out.Capacity = sizedCapacity(memory, threads, d.MaxClaims)
	}
	if taint {
		out.Taints = []resourceapi.DeviceTaint{{
			Key: driver + "/" + TaintUnhealthy, Value: "mps-not-serving", Effect: resourceapi.DeviceTaintEffectNoSchedule,
		}}
	}
	return out
}

// sizedCapacity is what claims of a sized device consume (DRA consumable
// capacity): memory in whole MiB (a request is rounded up to the next
// MiB), up to the whole GPU, which a claim that names no memory gets;
// thread share from 1 to the GPU's, none by default (its clients then get
// the GPU's default share, competing with the others'); and one of the
// device's claims each, so no more than maxClaims claims (virtual_number)
// share it.
func sizedCapacity(memory, threads resource.Quantity, maxClaims int) map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
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
		CapClaims: {Value: *n(int64(maxClaims)), RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default:     n(1),
			ValidValues: []resource.Quantity{*n(1)},
		}},
	}
}
