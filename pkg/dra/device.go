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
	CapMemory         = "memory"
	CapThreads        = "threadPercentage"
	// SharingMPS is the value of AttrSharing.
	SharingMPS = "mps"
)

// Device is one virtual device as the plugin knows it: what the agent's
// reconcile handed over (one inventory row: the same plan, caps and CDI
// name the Cloudpods path uses), under its Kubernetes name.
type Device struct {
	// Name is the device's name in the ResourceSlice (a DNS label).
	Name string `json:"name"`
	// GPUUUID and Index name the virtual device as the plan does
	// (<GPU UUID>::<index>).
	GPUUUID string `json:"gpuUUID"`
	// GPUAddr is the GPU's PCI address as the agent's row carries it.
	GPUAddr     string    `json:"gpuAddr"`
	Index       int       `json:"index"`
	ProductName string    `json:"productName"`
	MemoryLimit units.MiB `json:"memoryLimitMiB"`
	// ThreadPercentage is the device's active thread percentage.
	ThreadPercentage int `json:"threadPercentage"`
	// CDIName is the qualified CDI device name in the host's spec.
	CDIName string `json:"cdiName"`
	Healthy bool   `json:"healthy"`
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
	var b strings.Builder
	for _, r := range strings.ToLower(gpuUUID) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	suffix := "-" + strconv.Itoa(index)
	s := strings.Trim(b.String(), "-")
	if max := 63 - len(suffix); len(s) > max {
		s = strings.TrimRight(s[:max], "-")
	}
	return s + suffix
}

// sliceDevice is d as the ResourceSlice publishes it.
func (d Device) sliceDevice(driverVersion string) resourceapi.Device {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrUUID:        {StringValue: ptr.To(d.GPUUUID)},
		AttrProductName: {StringValue: ptr.To(d.ProductName)},
		AttrIndex:       {IntValue: ptr.To(int64(d.Index))},
		AttrSharing:     {StringValue: ptr.To(SharingMPS)},
	}
	if driverVersion != "" {
		attrs[AttrDriverVersion] = resourceapi.DeviceAttribute{StringValue: ptr.To(driverVersion)}
	}
	return resourceapi.Device{
		Name:       d.Name,
		Attributes: attrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapMemory:  {Value: *resource.NewQuantity(int64(d.MemoryLimit.Bytes()), resource.BinarySI)},
			CapThreads: {Value: *resource.NewQuantity(int64(d.ThreadPercentage), resource.DecimalSI)},
		},
	}
}
