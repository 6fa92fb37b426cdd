package server

import (
	"encoding/json"
	"errors"
	"strings"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// deviceInput is the body of POST and PUT /isolated_devices: the change
// (api.DevicePatch), so a PUT changes only the fields sent. pcie_info is
// kept raw to tell "absent" (no change) from null (clear it). Read-only
// fields (updated_at, update_version and the details) are accepted and
// ignored, so a client may send back what it read; fields Cloudpods' host
// agent sends that this inventory does not keep (detected_on_host,
// card_path, ...) are ignored as unknown.
type deviceInput struct {
	api.DevicePatch
	PCIEInfo      json.RawMessage `json:"pcie_info"`
	UpdateVersion *int            `json:"update_version"`
	UpdatedAt     *time.Time      `json:"updated_at"`
	Host          *string         `json:"host"`
	Vendor        *string         `json:"vendor"`
	// Guest and GuestStatus are read-only, whatever their JSON type
	// (Cloudpods' master answers lists here).
	Guest       json.RawMessage `json:"guest"`
	GuestStatus json.RawMessage `json:"guest_status"`
}

// UnmarshalJSON decodes the body as if the patch's fields were
// deviceInput's own: a wrong type is named by its JSON path alone
// (encoding/json puts the embedded struct's Go name in it).
func (in *deviceInput) UnmarshalJSON(b []byte) error {
	type fields deviceInput
	err := json.Unmarshal(b, (*fields)(in))
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		te.Field = strings.TrimPrefix(te.Field, "DevicePatch.")
	}
	return err
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
	info = new(api.PCIEInfo)
	if err := json.Unmarshal(in.PCIEInfo, info); err != nil {
		return nil, false, badInput("field pcie_info: %v", strings.TrimPrefix(err.Error(), "json: "))
	}
	return info, true, nil
}

// create is the device to create. index and device_minor default to -1
// (unknown) and numa_node to 0, as Cloudpods stores them when a client
// leaves them out (its host agent leaves numa_node out when it cannot read
// it; this project's daemon always sends one, -1 when unknown). The id,
// when sent, reaches the store, which refuses it.
func (in *deviceInput) create() (api.IsolatedDevice, error) {
	u, err := in.update()
	if err != nil {
		return api.IsolatedDevice{}, err
	}
	d := api.IsolatedDevice{ID: deref(in.ID), HostID: deref(in.HostID), Index: -1, DeviceMinor: -1}
	u.Apply(&d)
	return d, nil
}

// update is the change a PUT asks for. Zero values of id, host_id and
// created_at count as not sent (a client marshalling api.IsolatedDevice
// always sends them); other values must match the stored ones.
func (in *deviceInput) update() (store.DeviceUpdate, error) {
	u := in.DevicePatch
	var err error
	if u.PCIEInfo, u.SetPCIEInfo, err = in.pcie(); err != nil {
		return store.DeviceUpdate{}, err
	}
	u.ID, u.HostID = nonEmpty(in.ID), nonEmpty(in.HostID)
	if in.CreatedAt != nil && in.CreatedAt.IsZero() {
		u.CreatedAt = nil
	}
	return u, nil
}

// hostInput is the body of POST and PUT /hosts, like deviceInput.
// generate_name is what Cloudpods' host agent sends instead of a name for a
// new host; the many other fields it sends (cpu_count, mem_size, sys_info,
// ...) are ignored as unknown.
type hostInput struct {
	ID           *string    `json:"id"`
	Name         *string    `json:"name"`
	GenerateName *string    `json:"generate_name"`
	AccessIP     *string    `json:"access_ip"`
	AccessMAC    *string    `json:"access_mac"`
	HostType     *string    `json:"host_type"`
	CreatedAt    *time.Time `json:"created_at"`
	UpdatedAt    *time.Time `json:"updated_at"`
}

type hostBody struct {
	Host *hostInput `json:"host"`
}

// name is the host's name: name, else generate_name.
func (in *hostInput) name() *string {
	if in.Name == nil || *in.Name == "" {
		return in.GenerateName
	}
	return in.Name
}

func (in *hostInput) create() api.Host {
	return api.Host{ID: deref(in.ID), Name: deref(in.name()), AccessIP: deref(in.AccessIP),
		AccessMAC: deref(in.AccessMAC), HostType: deref(in.HostType)}
}

func (in *hostInput) update() store.HostUpdate {
	u := store.HostUpdate{ID: nonEmpty(in.ID), Name: in.Name, AccessIP: in.AccessIP, AccessMAC: in.AccessMAC, HostType: in.HostType}
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

// orDefault is *p, or def for nil (a field the body left out).
func orDefault[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// deref is *p, or the zero value for nil (a field the body left out).
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
