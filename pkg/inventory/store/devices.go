package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"yunion.io/x/mps-daemon/pkg/api"
)

// DeviceUpdate names the fields of an isolated device to change; nil leaves
// a field as it is. ID, HostID and CreatedAt may be given only with their
// current value (a client echoing the device it read back): a device never
// moves to another host. PCIEInfo is applied when SetPCIEInfo is true (nil
// clears it).
type DeviceUpdate struct {
	ID        *string
	HostID    *string
	CreatedAt *time.Time

	Name, DevType, Model, Addr, VendorDeviceID, MdevID *string
	DevicePath, RenderPath, CDIName, GuestID           *string
	NumaNode, Index, DeviceMinor                       *int
	MPSMemoryLimit, MPSMemoryTotal                     *int
	MPSThreadPercentage                                *int
	// Unhealthy and PendingRemoval are the host's to set (see api.IsolatedDevice).
	Unhealthy, PendingRemoval *bool

	SetPCIEInfo bool
	PCIEInfo    *api.PCIEInfo
}

// deviceColumns and deviceFrom read a device with its host's name (for
// details); the order matches scanDevice.
const (
	deviceColumns = `d.id, d.name, d.host_id, d.dev_type, d.model, d.addr, d.vendor_device_id, d.mdev_id,
		d.device_path, d.render_path, d.cdi_name, d.numa_node, d.pcie_info, d.dev_index, d.device_minor,
		d.mps_memory_limit, d.mps_memory_total, d.mps_thread_percentage, d.guest_id,
		d.unhealthy, d.pending_removal, d.created_at, d.updated_at, h.name`
	deviceFrom = ` FROM isolated_devices d JOIN hosts h ON h.id = d.host_id`
	// pageColumns are deviceColumns and the seq a marker page needs.
	pageColumns = deviceColumns + `, d.seq`
	// returningColumns are pageColumns for an UPDATE's RETURNING (no host
	// name: no details).
	returningColumns = `id, name, host_id, dev_type, model, addr, vendor_device_id, mdev_id,
		device_path, render_path, cdi_name, numa_node, pcie_info, dev_index, device_minor,
		mps_memory_limit, mps_memory_total, mps_thread_percentage, guest_id,
		unhealthy, pending_removal, created_at, updated_at, '', seq`
)

// CreateDevice adds an isolated device. HostID may be the host's id or name;
// the stored row carries the id. The store assigns id and timestamps.
func (s *Store) CreateDevice(ctx context.Context, d api.IsolatedDevice) (api.IsolatedDevice, error) {
	if d.ID != "" {
		return api.IsolatedDevice{}, refuse(ErrInvalid, "id is assigned by the server")
	}
	if d.HostID == "" {
		return api.IsolatedDevice{}, missing("host_id")
	}
	if err := validateDevice(d); err != nil {
		return api.IsolatedDevice{}, err
	}
	pcie, err := encodePCIE(d.PCIEInfo)
	if err != nil {
		return api.IsolatedDevice{}, err
	}
	d.ID = uuid.NewString()
	d.CreatedAt = s.timestamp()
	d.UpdatedAt = d.CreatedAt
	d.Host, d.Guest, d.GuestStatus = "", "", ""
	err = s.inTx(ctx, false, func(tx *sql.Tx) error {
		h, err := s.getHost(ctx, tx, d.HostID)
		if err != nil {
			return err
		}
		d.HostID = h.ID
		_, err = s.prep(tx).ExecContext(ctx, s.d.bind(`INSERT INTO isolated_devices (`+deviceInsertColumns+`) VALUES `+deviceInsertPlaceholders),
			deviceInsertArgs(d, pcie)...)
		return s.deviceWriteError(err, d)
	})
	if err != nil {
		return api.IsolatedDevice{}, err
	}
	return d, nil
}

// GetDevice reads one device by id. Host, Guest and GuestStatus (details)
// are left empty.
func (s *Store) GetDevice(ctx context.Context, id string) (api.IsolatedDevice, error) {
	return s.getDevice(ctx, s.db, id)
}

func (s *Store) getDevice(ctx context.Context, q querier, id string) (api.IsolatedDevice, error) {
	return s.readDevice(ctx, q, id, "")
}

// lockDevice is getDevice for a write transaction that then changes the
// row: on PostgreSQL it locks the row, so the write cannot find it changed.
func (s *Store) lockDevice(ctx context.Context, tx *sql.Tx, id string) (api.IsolatedDevice, error) {
	return s.readDevice(ctx, tx, id, s.d.forUpdate("d"))
}

func (s *Store) readDevice(ctx context.Context, q querier, id, lock string) (api.IsolatedDevice, error) {
	row := s.prep(q).QueryRowContext(ctx, s.d.bind(`SELECT `+deviceColumns+deviceFrom+` WHERE d.id = ?`+lock), id)
	d, err := scanDevice(row, false)
	if errors.Is(err, sql.ErrNoRows) {
		return api.IsolatedDevice{}, refuse(ErrNotFound, "isolated device %q not found", id)
	}
	if err != nil {
		return api.IsolatedDevice{}, fmt.Errorf("reading isolated device %s: %w", id, err)
	}
	return d, nil
}

// UpdateDevice changes the fields u names and returns the device as stored.
// It may give a free device a guest or free a held one, but not move a
// device from one guest to another (ErrInUse: detach it first). The row is
// read locked and the write is conditional on the guest_id read (see
// alloc.go), so an attach or detach that commits in between is never
// overwritten with the old guest_id.
func (s *Store) UpdateDevice(ctx context.Context, id string, u DeviceUpdate) (api.IsolatedDevice, error) {
	var d api.IsolatedDevice
	err := s.retryRaces(ctx, "updating isolated device "+id, func() error {
		return s.inTx(ctx, false, func(tx *sql.Tx) error {
			cur, err := s.lockDevice(ctx, tx, id)
			if err != nil {
				return err
			}
			d = cur
			if err := applyDeviceUpdate(&d, u); err != nil {
				return err
			}
			if cur.GuestID != "" && d.GuestID != "" && d.GuestID != cur.GuestID {
				return refuse(ErrInUse, "%s %s: detach it before giving it to %s", api.MsgDeviceUsedByServer, cur.GuestID, d.GuestID)
			}
			pcie, err := encodePCIE(d.PCIEInfo)
			if err != nil {
				return err
			}
			d.UpdatedAt = s.timestamp()
			res, err := s.prep(tx).ExecContext(ctx, s.d.bind(`UPDATE isolated_devices SET name = ?, dev_type = ?, model = ?, addr = ?,
				vendor_device_id = ?, mdev_id = ?, device_path = ?, render_path = ?, cdi_name = ?, numa_node = ?, pcie_info = ?,
				dev_index = ?, device_minor = ?, mps_memory_limit = ?, mps_memory_total = ?, mps_thread_percentage = ?,
				guest_id = ?, unhealthy = ?, pending_removal = ?, updated_at = ? WHERE id = ? AND guest_id = ?`),
				d.Name, d.DevType, d.Model, d.Addr, d.VendorDeviceID, d.MdevID, d.DevicePath, d.RenderPath, d.CDIName,
				d.NumaNode, pcie, d.Index, d.DeviceMinor, d.MPSMemoryLimit, d.MPSMemoryTotal,
				d.MPSThreadPercentage, d.GuestID, d.Unhealthy, d.PendingRemoval, formatTime(d.UpdatedAt),
				d.ID, cur.GuestID)
			if err := s.deviceWriteError(err, d); err != nil {
				return err
			}
			if n, err := rowsAffected(res); err != nil || n == 0 {
				return cmp.Or(err, errRace)
			}
			return nil
		})
	})
	if err != nil {
		return api.IsolatedDevice{}, err
	}
	return d, nil
}

func applyDeviceUpdate(d *api.IsolatedDevice, u DeviceUpdate) error {
	if u.ID != nil && *u.ID != d.ID {
		return refuse(ErrInvalid, "id cannot be changed")
	}
	if u.HostID != nil && *u.HostID != d.HostID {
		return refuse(ErrInvalid, "host_id cannot be changed")
	}
	if u.CreatedAt != nil && !u.CreatedAt.Equal(d.CreatedAt) {
		return refuse(ErrInvalid, "created_at cannot be changed")
	}
	for _, f := range []struct{ dst, v *string }{
		{&d.Name, u.Name}, {&d.DevType, u.DevType}, {&d.Model, u.Model}, {&d.Addr, u.Addr},
		{&d.VendorDeviceID, u.VendorDeviceID}, {&d.MdevID, u.MdevID}, {&d.DevicePath, u.DevicePath},
		{&d.RenderPath, u.RenderPath}, {&d.CDIName, u.CDIName}, {&d.GuestID, u.GuestID},
	} {
		setIf(f.dst, f.v)
	}
	for _, f := range []struct{ dst, v *int }{
		{&d.NumaNode, u.NumaNode}, {&d.Index, u.Index}, {&d.DeviceMinor, u.DeviceMinor},
		{&d.MPSMemoryLimit, u.MPSMemoryLimit}, {&d.MPSMemoryTotal, u.MPSMemoryTotal},
		{&d.MPSThreadPercentage, u.MPSThreadPercentage},
	} {
		setIf(f.dst, f.v)
	}
	setIf(&d.Unhealthy, u.Unhealthy)
	setIf(&d.PendingRemoval, u.PendingRemoval)
	if u.SetPCIEInfo {
		d.PCIEInfo = u.PCIEInfo
	}
	return validateDevice(*d)
}

// DeleteDevice removes a device and returns it as it was. A device held by
// a guest (guest_id set) is kept and ErrInUse returned with Cloudpods'
// message, so a host's sync never pulls a device from under a running
// guest. It never forces: that is PurgeDevice's.
func (s *Store) DeleteDevice(ctx context.Context, id string) (api.IsolatedDevice, error) {
	d, _, err := s.PurgeDevice(ctx, id, false)
	return d, err
}

// validateDevice checks what every stored device must satisfy.
func validateDevice(d api.IsolatedDevice) error {
	for _, f := range []struct{ name, v string }{
		{"dev_type", d.DevType}, {"addr", d.Addr}, {"vendor_device_id", d.VendorDeviceID},
	} {
		if f.v == "" {
			return missing(f.name)
		}
	}
	if d.NumaNode < -1 {
		return refuse(ErrInvalid, "numa_node must be -1 (unknown) or a node number")
	}
	if d.MPSMemoryLimit < 0 || d.MPSMemoryTotal < 0 {
		return refuse(ErrInvalid, "mps_memory_limit and mps_memory_total must not be negative")
	}
	if d.MPSThreadPercentage < 0 || d.MPSThreadPercentage > 100 {
		return refuse(ErrInvalid, "mps_thread_percentage must be between 0 and 100")
	}
	return nil
}

// deviceWriteError turns a constraint violation of an insert or update into
// the refusal a client understands.
func (s *Store) deviceWriteError(err error, d api.IsolatedDevice) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(s.d.constraint(err), ErrDuplicate):
		return refuse(ErrDuplicate, "isolated device with vendor_device_id %s and addr %s already exists on host %s",
			d.VendorDeviceID, d.Addr, d.HostID)
	case errors.Is(s.d.constraint(err), ErrNotFound):
		return refuse(ErrNotFound, "host %q not found", d.HostID)
	}
	return fmt.Errorf("writing isolated device %s: %w", d.ID, err)
}

func encodePCIE(p *api.PCIEInfo) (sql.NullString, error) {
	if p == nil {
		return sql.NullString{}, nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return sql.NullString{}, fmt.Errorf("encoding pcie_info: %w", err)
	}
	return sql.NullString{String: string(b), Valid: true}, nil
}

// scanDeviceSeq scans deviceColumns followed by d.seq (pageColumns).
func scanDeviceSeq(r rowScanner, details bool) (api.IsolatedDevice, int64, error) {
	var seq int64
	d, err := scanDevice(r, details, &seq)
	return d, seq, err
}

// scanDevice scans deviceColumns, then extra.
func scanDevice(r rowScanner, details bool, extra ...any) (api.IsolatedDevice, error) {
	var d api.IsolatedDevice
	var pcie sql.NullString
	var created, updated dbTime
	var hostName string
	err := r.Scan(append([]any{&d.ID, &d.Name, &d.HostID, &d.DevType, &d.Model, &d.Addr, &d.VendorDeviceID, &d.MdevID,
		&d.DevicePath, &d.RenderPath, &d.CDIName, &d.NumaNode, &pcie, &d.Index, &d.DeviceMinor,
		&d.MPSMemoryLimit, &d.MPSMemoryTotal, &d.MPSThreadPercentage, &d.GuestID,
		&d.Unhealthy, &d.PendingRemoval, &created, &updated, &hostName}, extra...)...)
	if err != nil {
		return api.IsolatedDevice{}, err
	}
	if pcie.Valid {
		d.PCIEInfo = new(api.PCIEInfo)
		if err := json.Unmarshal([]byte(pcie.String), d.PCIEInfo); err != nil {
			return api.IsolatedDevice{}, fmt.Errorf("decoding pcie_info of %s: %w", d.ID, err)
		}
	}
	d.CreatedAt, d.UpdatedAt = created.t, updated.t
	if details {
		d.Host = hostName
	}
	return d, nil
}
