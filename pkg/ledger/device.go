package ledger

import (
	"strconv"
	"strings"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/units"
)

// claimsSuffix ends the name of a GPU's claims device.
const claimsSuffix = "-sized"

// Device is one published device as the plugin knows it: a fixed slice
// (what the agent's reconcile handed over: one inventory row, the same
// plan, caps and CDI name the Cloudpods path uses), or the one device of a
// GPU shared by claims of any size (Claims), under its Kubernetes name.
// The JSON names are the checkpoint's.
type Device struct {
	// Name is the device's name in the ResourceSlice (a DNS label).
	Name string `json:"name"`
	// GPUUUID and Index name the virtual device as the plan does
	// (<GPU UUID>::<index>); a claims device's Index is its GPU's one
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
	// claims device has none (each claim gets its own).
	CDIName string `json:"cdiName,omitempty"`
	Healthy bool   `json:"healthy"`
	// Claims: the GPU's one device that claims of any size share (the
	// device YAML's sharing: claims), each consuming its memory, thread
	// share and one of VirtualNumber.
	Claims bool `json:"sized,omitempty"`
	// VirtualNumber is the entry's virtual_number: how many claims the
	// claims device takes at once.
	VirtualNumber int `json:"maxClaims,omitempty"`
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

// claimsDevice is the row's device (the whole GPU, its one planned device)
// as the GPU's claims device taking virtualNumber claims.
func (d Device) claimsDevice(virtualNumber int) Device {
	d.Name = ClaimsDeviceName(d.GPUUUID)
	d.CDIName, d.Claims, d.VirtualNumber = "", true, virtualNumber
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
