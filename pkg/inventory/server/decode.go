package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// decodeBody reads one JSON value into dst, refusing unknown fields,
// trailing data and bodies over the size limit, with details that name
// what is wrong.
func (s *server) decodeBody(w http.ResponseWriter, r *http.Request, dst any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return s.bodyError(err)
	}
	var extra json.RawMessage
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
		return nil
	case err == nil:
		return badInput("request body holds more than one JSON value")
	default:
		return s.bodyError(err)
	}
}

func (s *server) bodyError(err error) error {
	var (
		maxErr  *http.MaxBytesError
		synErr  *json.SyntaxError
		typeErr *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, io.EOF):
		return badInput("request body is empty")
	case errors.As(err, &maxErr):
		return badInput("request body is larger than %d bytes", maxErr.Limit)
	case errors.As(err, &synErr):
		return badInput("malformed JSON at byte %d: %v", synErr.Offset, synErr)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badInput("malformed JSON: unexpected end of body")
	case errors.As(err, &typeErr):
		return badInput("field %s: expected %s, got JSON %s", typeErr.Field, typeErr.Type, typeErr.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return badInput("unknown field %s", name)
	}
	return badInput("invalid request body: %v", err)
}

// deviceInput is the body of POST and PUT /isolated_devices: every field of
// api.IsolatedDevice, as pointers so a PUT changes only the fields sent.
// pcie_info is kept raw to tell "absent" (no change) from null (clear it).
// Read-only fields (updated_at and the details) are accepted and ignored,
// so a client may send back what it read.
type deviceInput struct {
	ID                  *string         `json:"id"`
	Name                *string         `json:"name"`
	HostID              *string         `json:"host_id"`
	DevType             *string         `json:"dev_type"`
	Model               *string         `json:"model"`
	Addr                *string         `json:"addr"`
	VendorDeviceID      *string         `json:"vendor_device_id"`
	MdevID              *string         `json:"mdev_id"`
	DevicePath          *string         `json:"device_path"`
	RenderPath          *string         `json:"render_path"`
	CDIName             *string         `json:"cdi_name"`
	NumaNode            *int            `json:"numa_node"`
	PCIEInfo            json.RawMessage `json:"pcie_info"`
	Index               *int            `json:"index"`
	DeviceMinor         *int            `json:"device_minor"`
	MPSMemoryLimit      *int            `json:"mps_memory_limit"`
	MPSMemoryTotal      *int            `json:"mps_memory_total"`
	MPSThreadPercentage *int            `json:"mps_thread_percentage"`
	GuestID             *string         `json:"guest_id"`
	Unhealthy           *bool           `json:"unhealthy"`
	PendingRemoval      *bool           `json:"pending_removal"`
	CreatedAt           *time.Time      `json:"created_at"`
	UpdatedAt           *time.Time      `json:"updated_at"`
	Host                *string         `json:"host"`
	Guest               *string         `json:"guest"`
	GuestStatus         *string         `json:"guest_status"`
}

type deviceBody struct {
	IsolatedDevice *deviceInput `json:"isolated_device"`
}

// pcie decodes pcie_info: set reports whether the field was sent at all.
func (in *deviceInput) pcie() (info *api.PCIEInfo, set bool, err error) {
	if len(in.PCIEInfo) == 0 {
		return nil, false, nil
	}
	if string(in.PCIEInfo) == "null" {
		return nil, true, nil
	}
	dec := json.NewDecoder(bytes.NewReader(in.PCIEInfo))
	dec.DisallowUnknownFields()
	info = new(api.PCIEInfo)
	if err := dec.Decode(info); err != nil {
		return nil, false, badInput("field pcie_info: %v", strings.TrimPrefix(err.Error(), "json: "))
	}
	return info, true, nil
}

// create is the device to create. numa_node defaults to -1 (unknown), as 0
// is a real node. The id, when sent, reaches the store, which refuses it.
func (in *deviceInput) create() (api.IsolatedDevice, error) {
	info, _, err := in.pcie()
	if err != nil {
		return api.IsolatedDevice{}, err
	}
	d := api.IsolatedDevice{
		ID: deref(in.ID), HostID: deref(in.HostID), Name: deref(in.Name), DevType: deref(in.DevType),
		Model: deref(in.Model), Addr: deref(in.Addr), VendorDeviceID: deref(in.VendorDeviceID),
		MdevID: deref(in.MdevID), DevicePath: deref(in.DevicePath), RenderPath: deref(in.RenderPath),
		CDIName: deref(in.CDIName), GuestID: deref(in.GuestID),
		NumaNode: -1, PCIEInfo: info, Index: deref(in.Index), DeviceMinor: deref(in.DeviceMinor),
		MPSMemoryLimit: deref(in.MPSMemoryLimit), MPSMemoryTotal: deref(in.MPSMemoryTotal),
		MPSThreadPercentage: deref(in.MPSThreadPercentage),
		Unhealthy:           deref(in.Unhealthy), PendingRemoval: deref(in.PendingRemoval),
	}
	if in.NumaNode != nil {
		d.NumaNode = *in.NumaNode
	}
	return d, nil
}

// update is the change a PUT asks for. Zero values of id, host_id and
// created_at count as not sent (a client marshalling api.IsolatedDevice
// always sends them); other values must match the stored ones.
func (in *deviceInput) update() (store.DeviceUpdate, error) {
	info, set, err := in.pcie()
	if err != nil {
		return store.DeviceUpdate{}, err
	}
	u := store.DeviceUpdate{
		ID: nonEmpty(in.ID), HostID: nonEmpty(in.HostID),
		Name: in.Name, DevType: in.DevType, Model: in.Model, Addr: in.Addr,
		VendorDeviceID: in.VendorDeviceID, MdevID: in.MdevID, DevicePath: in.DevicePath,
		RenderPath: in.RenderPath, CDIName: in.CDIName, GuestID: in.GuestID,
		NumaNode: in.NumaNode, Index: in.Index, DeviceMinor: in.DeviceMinor,
		MPSMemoryLimit: in.MPSMemoryLimit, MPSMemoryTotal: in.MPSMemoryTotal,
		MPSThreadPercentage: in.MPSThreadPercentage,
		Unhealthy:           in.Unhealthy, PendingRemoval: in.PendingRemoval,
		SetPCIEInfo: set, PCIEInfo: info,
	}
	if in.CreatedAt != nil && !in.CreatedAt.IsZero() {
		u.CreatedAt = in.CreatedAt
	}
	return u, nil
}

// hostInput is the body of POST and PUT /hosts, like deviceInput.
type hostInput struct {
	ID        *string    `json:"id"`
	Name      *string    `json:"name"`
	AccessIP  *string    `json:"access_ip"`
	HostType  *string    `json:"host_type"`
	CreatedAt *time.Time `json:"created_at"`
	UpdatedAt *time.Time `json:"updated_at"`
}

type hostBody struct {
	Host *hostInput `json:"host"`
}

func (in *hostInput) create() api.Host {
	return api.Host{ID: deref(in.ID), Name: deref(in.Name), AccessIP: deref(in.AccessIP), HostType: deref(in.HostType)}
}

func (in *hostInput) update() store.HostUpdate {
	u := store.HostUpdate{ID: nonEmpty(in.ID), Name: in.Name, AccessIP: in.AccessIP, HostType: in.HostType}
	if in.CreatedAt != nil && !in.CreatedAt.IsZero() {
		u.CreatedAt = in.CreatedAt
	}
	return u
}

func nonEmpty(p *string) *string {
	if p == nil || *p == "" {
		return nil
	}
	return p
}

// deref is *p, or the zero value for nil (a field the body left out).
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
