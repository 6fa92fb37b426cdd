// Package api holds the REST types shared by the inventory server, the host
// agent and mpsctl. It mirrors Cloudpods' region API (`hosts`,
// `isolated_devices`): the same JSON envelopes and snake_case field names, so
// tools written for Cloudpods read it unchanged. It imports nothing of ours.
package api

import (
	"strconv"
	"strings"
	"time"
)

// DevTypeNvidiaMPS is the dev_type of an MPS virtual device, as Cloudpods names it.
const DevTypeNvidiaMPS = "NVIDIA_MPS"

// SharingModes are the values Cloudpods accepts for an isolated device's
// sharing_mode (an empty one is kept as not set, as Cloudpods 4.0.3 and
// this project's daemon send none).
var SharingModes = []string{"EXCLUSIVE", "SRIOV", "MDEV", "HAMI", "UNLIMITED", "MPS"}

// Host is one GPU host that registers its devices.
type Host struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	AccessIP string `json:"access_ip,omitempty"`
	// AccessMAC is the MAC of the host's access interface, by which
	// Cloudpods' host agent finds its own record (GET /hosts?any_mac=).
	AccessMAC string    `json:"access_mac,omitempty"`
	HostType  string    `json:"host_type,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// PCIEInfo is the `pcie_info` object of an isolated device. Field order is
// alphabetical, as Cloudpods prints it.
type PCIEInfo struct {
	LaneWidth           int    `json:"lane_width"`
	Throughput          string `json:"throughput"`
	TransferRatePerLane string `json:"transfer_rate_per_lane"`
	Version             string `json:"version"`
}

// IsolatedDevice is one row of the `isolated_devices` resource: for MPS, one
// virtual device (one slice of a physical GPU). It is the device record,
// spelled once: its JSON names are the wire's, and its tags say the rest
// of what the backends do with a field, so that a new field is this
// struct, DevicePatch and whoever sets it:
//   - db: the inventory's column, when not the JSON name ("-": none, a
//     detail read from elsewhere). The store reads, writes and adds
//     (to an older database) the columns of every other field.
//   - hostagent: what Cloudpods' host agent sends a region for the field
//     of an MPS device, and compares to decide whether a row needs an
//     update: "always" sent, "set" sent when set (a number > 0, a string
//     not empty, a pointer not nil), "once" sent when set and compared
//     only while the region has none. Fields without it are not sent.
type IsolatedDevice struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	HostID  string `json:"host_id"`
	DevType string `json:"dev_type" hostagent:"always"`
	// SharingMode is Cloudpods' sharing mode of the row (one of
	// SharingModes); empty when the client sent none.
	SharingMode    string `json:"sharing_mode,omitempty"`
	Model          string `json:"model" hostagent:"always"`
	Addr           string `json:"addr" hostagent:"always"`
	VendorDeviceID string `json:"vendor_device_id" hostagent:"always"`
	MdevID         string `json:"mdev_id,omitempty"`
	DevicePath     string `json:"device_path" hostagent:"set"`
	RenderPath     string `json:"render_path,omitempty"`
	// CDIName is what a container runtime is given to start a container on
	// the device (`podman run --device <cdi_name>`); set by the host.
	CDIName     string    `json:"cdi_name,omitempty"`
	NumaNode    int       `json:"numa_node" hostagent:"always"`
	PCIEInfo    *PCIEInfo `json:"pcie_info,omitempty" hostagent:"once"`
	Index       int       `json:"index" db:"dev_index"`
	DeviceMinor int       `json:"device_minor"`
	// MPSMemoryLimit is the device's cap in MiB: memory.total / N.
	MPSMemoryLimit int `json:"mps_memory_limit" hostagent:"set"`
	// MPSMemoryTotal is the physical GPU's memory in MiB.
	MPSMemoryTotal int `json:"mps_memory_total" hostagent:"set"`
	// MPSThreadPercentage is the active thread percentage: the share the
	// host's thread policy or the device's QoS class gives it.
	MPSThreadPercentage int `json:"mps_thread_percentage" hostagent:"set"`
	// GuestID is who holds the device; empty when free.
	GuestID string `json:"guest_id"`
	// Unhealthy is set by the host while the GPU's MPS is not serving (a
	// dead control daemon, a server in FAULT): such a device is not handed
	// out, and it comes back by itself once the host reports it healthy.
	Unhealthy bool `json:"unhealthy"`
	// PendingRemoval marks a device the host no longer wants (resize down,
	// GPU removed from the config) that a guest still holds: it is not handed
	// out again and is removed once released.
	PendingRemoval bool `json:"pending_removal"`
	// HotPluggable, VirtualNum (how many guests may share the row: 1 for
	// an MPS slice) and MemorySize (MiB, 0 unknown) are Cloudpods' fields
	// as its host agent sends them.
	HotPluggable bool `json:"hot_pluggable"`
	VirtualNum   int  `json:"virtual_num"`
	MemorySize   int  `json:"memory_size"`
	// UpdateVersion counts the updates (PUT) of the row, as Cloudpods
	// counts them; attaching and detaching do not count.
	UpdateVersion int       `json:"update_version"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`

	// Filled only in lists and shows asked for with details=true (a show
	// always has them, as in Cloudpods). Guest is the guest's id: guests
	// live outside this inventory.
	Host        string `json:"host,omitempty" db:"-"`
	Vendor      string `json:"vendor,omitempty" db:"-"`
	Guest       string `json:"guest,omitempty" db:"-"`
	GuestStatus string `json:"guest_status,omitempty" db:"-"`
}

// DevicePatch is a change to an isolated device: the fields to set, nil
// leaving one as it is, each named as IsolatedDevice's field it sets (Apply
// and PatchOf go by the names). It is the one form of a change, what a PUT
// body decodes into, what the store applies and what a host's sync sends.
// ID, HostID and CreatedAt are not changes (patch:"identity"): a client may
// echo them (a device it read back) and the store refuses any other value.
// A patch:"nonzero" field's zero value is no change. PCIEInfo, of the
// record's own type, is set when SetPCIEInfo is true (nil clears it).
type DevicePatch struct {
	ID        *string    `json:"id,omitempty" patch:"identity"`
	HostID    *string    `json:"host_id,omitempty" patch:"identity"`
	CreatedAt *time.Time `json:"created_at,omitempty" patch:"identity"`

	// Name: an empty one leaves the name as it is (a device always has
	// one; Cloudpods' clients never send an empty string).
	Name                *string `json:"name,omitempty" patch:"nonzero"`
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
	VirtualNum *int `json:"virtual_num,omitempty" patch:"nonzero"`
	MemorySize *int `json:"memory_size,omitempty"`

	SetPCIEInfo bool      `json:"-"`
	PCIEInfo    *PCIEInfo `json:"pcie_info,omitempty"`
}

// AttachRequest asks for Count devices of a model on a host, as Cloudpods
// picks them: the GPU with the most free slices first, one guest's slices
// spread across GPUs (POST /servers/{guest}/attach-isolated-device).
type AttachRequest struct {
	// DevType defaults to NVIDIA_MPS.
	DevType string
	Model   string
	// Host is the host's id or name.
	Host string
	// Count defaults to 1 when 0.
	Count int
	// NUMANode, when set and not -1 (any node), keeps the devices on that
	// NUMA node.
	NUMANode *int
	// SharingMode, when set, keeps the picks to devices of that sharing
	// mode or of none (Cloudpods' model attach names one).
	SharingMode string
}

// IsolatedDeviceList is the answer of GET /isolated_devices.
//
// A request with paging_marker (Cloudpods' marker paging; "" for the first
// page) is answered with the marker fields instead of total and offset, as
// Cloudpods answers it: NextMarker is the paging_marker of the next page, ""
// after the last one, and each page costs the same however deep it is.
// MarkerField and MarkerOrder say what the pages are ordered by ("seq",
// the creation order; "ASC" or "DESC"). A client tells the two answers
// apart by MarkerField.
type IsolatedDeviceList struct {
	IsolatedDevices []IsolatedDevice `json:"isolated_devices"`
	Total           int              `json:"total"`
	Limit           int              `json:"limit"`
	Offset          int              `json:"offset"`
	NextMarker      string           `json:"next_marker,omitempty"`
	MarkerField     string           `json:"marker_field,omitempty"`
	MarkerOrder     string           `json:"marker_order,omitempty"`
	HostDevicesVersion
}

// IsolatedDeviceMarkerList is the answer of GET /isolated_devices with
// paging_marker: IsolatedDeviceList's marker form, with next_marker always
// present (a client decodes either into IsolatedDeviceList).
type IsolatedDeviceMarkerList struct {
	IsolatedDevices []IsolatedDevice `json:"isolated_devices"`
	Limit           int              `json:"limit"`
	NextMarker      string           `json:"next_marker"`
	MarkerField     string           `json:"marker_field"`
	MarkerOrder     string           `json:"marker_order"`
	HostDevicesVersion
}

// ParamDevicesVersion is the query parameter of GET /isolated_devices
// that asks a host's devices conditionally: with host (or host_id) and
// paging_marker= (the first page of a marker walk), a version this
// inventory answered before (DevicesVersion). While the host's rows are
// at that version the answer is DevicesUnchanged and no rows; else the
// page as without it. An inventory that does not know it (an older one, a
// Cloudpods region) ignores it, as every unknown parameter, and answers
// the page.
const ParamDevicesVersion = "devices_version"

// HostDevicesVersion is what mps-inventory answers besides the rows of a
// marker page of one host's devices (a Cloudpods region answers neither:
// both are left out when empty). DevicesVersion is the version of the
// host's rows as the page's snapshot saw them: a decimal number the
// database gives the host whenever any of its rows is written, by anyone;
// opaque to clients, which only send it back (ParamDevicesVersion).
// DevicesUnchanged answers a conditional request whose version is still
// the host's: the rows are as they were, and none are sent.
type HostDevicesVersion struct {
	DevicesVersion   string `json:"devices_version,omitempty"`
	DevicesUnchanged bool   `json:"devices_unchanged,omitempty"`
}

// IsolatedDeviceBody wraps one device, in requests and answers.
type IsolatedDeviceBody struct {
	IsolatedDevice IsolatedDevice `json:"isolated_device"`
}

// IsolatedDevicesBody is the answer of attach and detach
// (POST /servers/{guest}/attach-isolated-device and
// detach-isolated-device): the devices the request changed. It is also
// the bulk create, request and answer: POST /isolated_devices with
// {"isolated_devices": [...]} creates them all or none, in their order
// (at most MaxCreateDevices), and answers them as created.
type IsolatedDevicesBody struct {
	IsolatedDevices []IsolatedDevice `json:"isolated_devices"`
}

// MaxCreateDevices is the most devices one bulk create may hold (a host of
// 16 GPUs split 48 ways has 768); more is a 400. Its rows are one
// statement, whose placeholders SQLite caps at 32766.
const MaxCreateDevices = 1000

// PurgeBody is the answer of POST /isolated_devices/{id}/purge: the device
// as it was, and the guest a forced purge detached it from (absent when it
// was free).
type PurgeBody struct {
	IsolatedDevice IsolatedDevice `json:"isolated_device"`
	DetachedGuest  string         `json:"detached_guest,omitempty"`
}

// HostList is the answer of GET /hosts.
type HostList struct {
	Hosts  []Host `json:"hosts"`
	Total  int    `json:"total"`
	Limit  int    `json:"limit"`
	Offset int    `json:"offset"`
}

// HostBody wraps one host, in requests and answers.
type HostBody struct {
	Host Host `json:"host"`
}

// Error is the body of every error answer, as Cloudpods shapes it.
type Error struct {
	Code    int    `json:"code"`
	Class   string `json:"class"`
	Details string `json:"details"`
}

// Error classes used by the inventory, Cloudpods' names for them.
const (
	ClassInputParameter = "InputParameterError"
	ClassNotFound       = "ResourceNotFoundError"
	ClassDuplicate      = "DuplicateResourceError"
	ClassInvalidStatus  = "InvalidStatusError"
	ClassUnauthorized   = "UnauthorizedError"
	ClassForbidden      = "ForbiddenError"
	ClassInternal       = "InternalServerError"
	// ClassBadRequest (400): the request cannot be done in the state the
	// data is in, e.g. purging a device a guest holds.
	ClassBadRequest = "BadRequestError"
	// ClassNotEmpty (406): deleting what something still depends on.
	ClassNotEmpty = "NotEmptyError"
	// ClassInsufficientResource (400): fewer free devices than asked for.
	ClassInsufficientResource = "InsufficientResourceError"
	// ClassConflict (409): the rows kept changing; the request may be sent again.
	ClassConflict = "ConflictError"
	// ClassHandlerNotFound (404): a path no route serves, Cloudpods'
	// class for it ("Handler /x not found"); ClassNotFound is a resource
	// a route looked for.
	ClassHandlerNotFound = "NotFoundError"
	// ClassMethodNotAllowed (405): a method no route serves on a path
	// that has routes; the answer's Allow header lists those it serves.
	ClassMethodNotAllowed = "MethodNotAllowedError"
	// ClassTooLarge (413): a request body over the size limit.
	ClassTooLarge = "TooLargeEntity"
	// ClassUnsupportedMediaType (415): a body that is not application/json
	// (this class is ours: Cloudpods has none).
	ClassUnsupportedMediaType = "UnsupportedMediaTypeError"
)

// MsgDeviceUsedByServer is Cloudpods' text for refusing to remove a held device.
const MsgDeviceUsedByServer = "Isolated device used by server"

// SliceAddr is the addr of slice i of the GPU at gpuAddr (its PCI address
// without domain) in Cloudpods' MPS rows: "1a:00.0-3".
func SliceAddr(gpuAddr string, i int) string { return gpuAddr + "-" + strconv.Itoa(i) }

// ParseSliceAddr splits an addr made by SliceAddr; ok is false for anything
// else (a GPU row's addr has no slice).
func ParseSliceAddr(addr string) (gpuAddr string, i int, ok bool) {
	k := strings.LastIndexByte(addr, '-')
	if k <= 0 {
		return "", 0, false
	}
	i, err := strconv.Atoi(addr[k+1:])
	if err != nil || i < 0 || strconv.Itoa(i) != addr[k+1:] {
		return "", 0, false
	}
	return addr[:k], i, true
}
