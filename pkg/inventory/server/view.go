package server

import (
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
)

// What the API answers, in Cloudpods' shape: the fields a Cloudpods region
// answers for an isolated device or a host, with its conventions (empty
// strings left out, timestamps with six fraction digits), so climc prints
// the same columns and values for the same rows. The stored fields come
// from api.IsolatedDevice; the rest are the constants a region answers for
// a device of a local host that nobody shared or emulated (deleted false,
// public_scope system, source local, no NVMe and no reserved resources).
// This project's own fields (cdi_name, unhealthy, pending_removal,
// guest_id) are left out when empty or false, so a device this project
// has nothing to add about looks exactly like a region's.

// wireTime is a timestamp as Cloudpods writes it: UTC, six fraction digits.
type wireTime time.Time

const wireTimeLayout = "2006-01-02T15:04:05.000000Z"

func (t wireTime) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Time(t).UTC().Format(wireTimeLayout) + `"`), nil
}

// deviceView is an isolated device as the API answers it.
type deviceView struct {
	api.IsolatedDevice
	// These replace api.IsolatedDevice's fields of the same JSON name.
	Name           string   `json:"name,omitempty"`
	GuestID        string   `json:"guest_id,omitempty"`
	Unhealthy      bool     `json:"unhealthy,omitempty"`
	PendingRemoval bool     `json:"pending_removal,omitempty"`
	CreatedAt      wireTime `json:"created_at"`
	UpdatedAt      wireTime `json:"updated_at"`
	// Cloudpods' fields this inventory has no use for, as a region answers
	// them for a local device.
	ImportedAt      wireTime `json:"imported_at"`
	Deleted         bool     `json:"deleted"`
	IsEmulated      bool     `json:"is_emulated"`
	IsInfinibandNic bool     `json:"is_infiniband_nic"`
	IsPublic        bool     `json:"is_public"`
	PublicScope     string   `json:"public_scope"`
	Source          string   `json:"source"`
	NvmeSizeMB      int      `json:"nvme_size_mb"`
	ReservedCPU     int      `json:"reserved_cpu"`
	ReservedMemory  int      `json:"reserved_memory"`
	ReservedStorage int      `json:"reserved_storage"`
}

func viewDevice(d api.IsolatedDevice) deviceView {
	return deviceView{
		IsolatedDevice: d,
		Name:           d.Name, GuestID: d.GuestID, Unhealthy: d.Unhealthy, PendingRemoval: d.PendingRemoval,
		CreatedAt: wireTime(d.CreatedAt), UpdatedAt: wireTime(d.UpdatedAt), ImportedAt: wireTime(d.CreatedAt),
		PublicScope: "system", Source: "local",
	}
}

func viewDevices(devs []api.IsolatedDevice) []deviceView {
	out := make([]deviceView, len(devs))
	for i, d := range devs {
		out[i] = viewDevice(d)
	}
	return out
}

// deviceBodyView is one device: {"isolated_device": {...}}.
type deviceBodyView struct {
	IsolatedDevice deviceView `json:"isolated_device"`
}

// deviceListView is a page by offset, as Cloudpods answers it: total,
// limit and offset are left out when 0, and an empty page is the empty
// list alone.
type deviceListView struct {
	IsolatedDevices []deviceView `json:"isolated_devices"`
	Total           int          `json:"total,omitempty"`
	Limit           int          `json:"limit,omitempty"`
	Offset          int          `json:"offset,omitempty"`
}

// deviceMarkerListView is a marker page (api.IsolatedDeviceMarkerList).
type deviceMarkerListView struct {
	IsolatedDevices []deviceView `json:"isolated_devices"`
	Limit           int          `json:"limit"`
	NextMarker      string       `json:"next_marker"`
	MarkerField     string       `json:"marker_field"`
	MarkerOrder     string       `json:"marker_order"`
	api.HostDevicesVersion
}

// devicesView is what attach and detach answer to a client that sent this
// project's own (unwrapped) body: the devices the request changed
// (api.IsolatedDevicesBody).
type devicesView struct {
	IsolatedDevices []deviceView `json:"isolated_devices"`
}

// purgeView is api.PurgeBody.
type purgeView struct {
	IsolatedDevice deviceView `json:"isolated_device"`
	DetachedGuest  string     `json:"detached_guest,omitempty"`
}

// serverView is what attach and detach answer to a client that sent
// Cloudpods' wrapped body ({"server": {...}}), which answers with the
// server: here a guest is only an id, so the server is that id and the
// devices it holds after the request.
type serverView struct {
	Server struct {
		ID              string       `json:"id"`
		Name            string       `json:"name"`
		IsolatedDevices []deviceView `json:"isolated_devices"`
	} `json:"server"`
}

func viewServer(guest string, held []api.IsolatedDevice) serverView {
	var v serverView
	v.Server.ID, v.Server.Name, v.Server.IsolatedDevices = guest, guest, viewDevices(held)
	return v
}

// hostView is a host as the API answers it.
type hostView struct {
	api.Host
	CreatedAt wireTime `json:"created_at"`
	UpdatedAt wireTime `json:"updated_at"`
}

func viewHost(h api.Host) hostView {
	return hostView{Host: h, CreatedAt: wireTime(h.CreatedAt), UpdatedAt: wireTime(h.UpdatedAt)}
}

type hostBodyView struct {
	Host hostView `json:"host"`
}

// hostListView is api.HostList in Cloudpods' shape (see deviceListView).
type hostListView struct {
	Hosts  []hostView `json:"hosts"`
	Total  int        `json:"total,omitempty"`
	Limit  int        `json:"limit,omitempty"`
	Offset int        `json:"offset,omitempty"`
}
