package api

import (
	"bytes"
	"encoding/json"
	"time"
)

// DevicePatch is a change to an isolated device: the fields to set, nil
// leaving one as it is. It is the one form of a change, what a PUT body
// decodes into, what the store applies and what a host's sync sends. ID,
// HostID and CreatedAt are not changes: a client may echo them (a device it
// read back) and the store refuses any other value. PCIEInfo is set when
// SetPCIEInfo is true (nil clears it).
type DevicePatch struct {
	ID        *string    `json:"id,omitempty"`
	HostID    *string    `json:"host_id,omitempty"`
	CreatedAt *time.Time `json:"created_at,omitempty"`

	// Name: an empty one leaves the name as it is (a device always has
	// one; Cloudpods' clients never send an empty string).
	Name                *string `json:"name,omitempty"`
	DevType             *string `json:"dev_type,omitempty"`
	SharingMode         *string `json:"sharing_mode,omitempty"`
	Model               *string `json:"model,omitempty"`
	Addr                *string `json:"addr,omitempty"`
	VendorDeviceID      *string `json:"vendor_device_id,omitempty"`
	MdevID              *string `json:"mdev_id,omitempty"`
	DevicePath          *string `json:"device_path,omitempty"`
	RenderPath          *string `json:"render_path,omitempty"`
	CDIName             *string `json:"cdi_name,omitempty"`
	NumaNode            *int    `json:"numa_node,omitempty"`
	Index               *int    `json:"index,omitempty"`
	DeviceMinor         *int    `json:"device_minor,omitempty"`
	MPSMemoryLimit      *int    `json:"mps_memory_limit,omitempty"`
	MPSMemoryTotal      *int    `json:"mps_memory_total,omitempty"`
	MPSThreadPercentage *int    `json:"mps_thread_percentage,omitempty"`
	GuestID             *string `json:"guest_id,omitempty"`
	Unhealthy           *bool   `json:"unhealthy,omitempty"`
	PendingRemoval      *bool   `json:"pending_removal,omitempty"`
	HotPluggable        *bool   `json:"hot_pluggable,omitempty"`
	// VirtualNum: 0 leaves it as it is (it is at least 1).
	VirtualNum *int `json:"virtual_num,omitempty"`
	MemorySize *int `json:"memory_size,omitempty"`

	SetPCIEInfo bool      `json:"-"`
	PCIEInfo    *PCIEInfo `json:"pcie_info,omitempty"`
}

// Apply makes d what p says; it checks nothing (the store does).
func (p DevicePatch) Apply(d *IsolatedDevice) {
	if p.Name != nil && *p.Name != "" {
		d.Name = *p.Name
	}
	if p.VirtualNum != nil && *p.VirtualNum != 0 {
		d.VirtualNum = *p.VirtualNum
	}
	set(&d.DevType, p.DevType)
	set(&d.SharingMode, p.SharingMode)
	set(&d.Model, p.Model)
	set(&d.Addr, p.Addr)
	set(&d.VendorDeviceID, p.VendorDeviceID)
	set(&d.MdevID, p.MdevID)
	set(&d.DevicePath, p.DevicePath)
	set(&d.RenderPath, p.RenderPath)
	set(&d.CDIName, p.CDIName)
	set(&d.NumaNode, p.NumaNode)
	set(&d.Index, p.Index)
	set(&d.DeviceMinor, p.DeviceMinor)
	set(&d.MPSMemoryLimit, p.MPSMemoryLimit)
	set(&d.MPSMemoryTotal, p.MPSMemoryTotal)
	set(&d.MPSThreadPercentage, p.MPSThreadPercentage)
	set(&d.GuestID, p.GuestID)
	set(&d.Unhealthy, p.Unhealthy)
	set(&d.PendingRemoval, p.PendingRemoval)
	set(&d.HotPluggable, p.HotPluggable)
	set(&d.MemorySize, p.MemorySize)
	if p.SetPCIEInfo {
		d.PCIEInfo = p.PCIEInfo
	}
}

// PatchOf is the patch that makes a device d (every field but the
// identity: id, host_id, created_at).
func PatchOf(d IsolatedDevice) DevicePatch {
	return DevicePatch{
		Name: &d.Name, DevType: &d.DevType, SharingMode: &d.SharingMode, Model: &d.Model, Addr: &d.Addr,
		VendorDeviceID: &d.VendorDeviceID, MdevID: &d.MdevID, DevicePath: &d.DevicePath, RenderPath: &d.RenderPath,
		CDIName: &d.CDIName, NumaNode: &d.NumaNode, Index: &d.Index, DeviceMinor: &d.DeviceMinor,
		MPSMemoryLimit: &d.MPSMemoryLimit, MPSMemoryTotal: &d.MPSMemoryTotal, MPSThreadPercentage: &d.MPSThreadPercentage,
		GuestID: &d.GuestID, Unhealthy: &d.Unhealthy, PendingRemoval: &d.PendingRemoval, HotPluggable: &d.HotPluggable,
		VirtualNum: &d.VirtualNum, MemorySize: &d.MemorySize, SetPCIEInfo: true, PCIEInfo: d.PCIEInfo,
	}
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// MarshalJSON writes the fields p sets, pcie_info null when it clears it.
func (p DevicePatch) MarshalJSON() ([]byte, error) {
	type fields DevicePatch
	b, err := json.Marshal(fields(p))
	if err != nil || !p.SetPCIEInfo || p.PCIEInfo != nil {
		return b, err
	}
	if bytes.Equal(b, []byte("{}")) {
		return []byte(`{"pcie_info":null}`), nil
	}
	return append(b[:len(b)-1], []byte(`,"pcie_info":null}`)...), nil
}
