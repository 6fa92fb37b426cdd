package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"

	"yunion.io/x/mps-daemon/pkg/api"
)

// DeviceUpdate is the change UpdateDevice makes: api.DevicePatch, the one
// form of a change to a device.
type DeviceUpdate = api.DevicePatch

// deviceFrom joins a device's host, for its name (details); the columns
// read are deviceColumns (columns.go).
const deviceFrom = ` FROM isolated_devices d JOIN hosts h ON h.id = d.host_id`

// CreateDevice adds an isolated device and returns it as stored, with its
// details. HostID may be the host's id or name; the stored row carries the
// id. The store assigns id and timestamps, and a name when d has none
// (dev_<host name>_<nanoseconds>, as Cloudpods names them); VirtualNum 0
// is stored as 1.
func (s *Store) CreateDevice(ctx context.Context, d api.IsolatedDevice) (api.IsolatedDevice, error) {
	if d.ID != "" {
		return api.IsolatedDevice{}, refuse(ErrInvalid, "id is assigned by the server")
	}
	if d.HostID == "" {
		return api.IsolatedDevice{}, missing("host_id")
	}
	if err := checkLen("host_id", d.HostID, api.MaxHostRefBytes); err != nil {
		return api.IsolatedDevice{}, err
	}
	d = newDeviceDefaults(d)
	if err := validateDevice(d); err != nil {
		return api.IsolatedDevice{}, err
	}
	d.ID = uuid.NewString()
	d.CreatedAt = s.timestamp()
	d.UpdatedAt = d.CreatedAt
	d.Host, d.Vendor, d.Guest, d.GuestStatus = "", "", "", ""
	err := s.inTx(ctx, false, func(tx *sql.Tx) error {
		h, err := s.getHost(ctx, tx, d.HostID)
		if err != nil {
			return err
		}
		d.HostID = h.ID
		if d.Name == "" {
			d.Name = generatedName(h.Name, s.now().UnixNano())
		}
		d = withDetails(d, h.Name)
		args, err := deviceArgs(d, notInserted...)
		if err != nil {
			return err
		}
		_, err = s.prep(tx).ExecContext(ctx, s.d.bind(`INSERT INTO isolated_devices (`+deviceInsertColumns+`) VALUES `+deviceInsertPlaceholders),
			args...)
		return s.deviceWriteError(err, d)
	})
	if err != nil {
		return api.IsolatedDevice{}, err
	}
	return d, nil
}

// GetDevice reads the device idOrName names, with its details (host name,
// vendor, guest). idOrName is resolved as Cloudpods resolves a path: a
// device id, or failing that a device name. A name no device has is
// ErrNotFound (climc then searches by name, and prints its own "not
// found"); a name several devices share is ErrDuplicate.
func (s *Store) GetDevice(ctx context.Context, idOrName string) (api.IsolatedDevice, error) {
	return s.readDevice(ctx, s.db, idOrName, "", true)
}

// getDevice is GetDevice within q, without details.
func (s *Store) getDevice(ctx context.Context, q querier, idOrName string) (api.IsolatedDevice, error) {
	return s.readDevice(ctx, q, idOrName, "", false)
}

// lockDevice is getDevice for a write transaction that then changes the
// row: on PostgreSQL it locks the row, so the write cannot find it changed.
func (s *Store) lockDevice(ctx context.Context, tx *sql.Tx, idOrName string, details bool) (api.IsolatedDevice, error) {
	return s.readDevice(ctx, tx, idOrName, s.d.forUpdate("d"), details)
}

// readDeviceQuery reads the device an id or a name names (id, name, id):
// the id's row first, then at most two of the name's, in id order (the
// order every statement that locks several device rows keeps, see
// alloc.go) so that a name two devices share is told apart from one.
var readDeviceQuery = `SELECT ` + deviceColumns + deviceFrom + `
	WHERE d.id = ? OR d.name = ? ORDER BY CASE WHEN d.id = ? THEN 0 ELSE 1 END, d.id LIMIT 2`

// readDevice reads the device idOrName names (see GetDevice) in one
// statement; lock is the dialect's row lock or "".
func (s *Store) readDevice(ctx context.Context, q querier, idOrName, lock string, details bool) (api.IsolatedDevice, error) {
	rows, err := s.prep(q).QueryContext(ctx, s.d.bind(readDeviceQuery+lock), idOrName, idOrName, idOrName)
	if err != nil {
		return api.IsolatedDevice{}, fmt.Errorf("reading isolated device %s: %w", idOrName, err)
	}
	defer rows.Close()
	var named []api.IsolatedDevice
	for rows.Next() {
		d, err := scanDevice(rows, details)
		if err != nil {
			return api.IsolatedDevice{}, fmt.Errorf("reading isolated device %s: %w", idOrName, err)
		}
		if d.ID == idOrName {
			return d, nil
		}
		named = append(named, d)
	}
	if err := rows.Err(); err != nil {
		return api.IsolatedDevice{}, fmt.Errorf("reading isolated device %s: %w", idOrName, err)
	}
	switch len(named) {
	case 0:
		return api.IsolatedDevice{}, deviceNotFound(idOrName)
	case 1:
		return named[0], nil
	}
	return api.IsolatedDevice{}, refuse(ErrDuplicate, "several isolated devices are named %s: name one by its id", idOrName)
}

// deviceNotFound is the refusal for a device id or name that names no
// device, in Cloudpods' words.
func deviceNotFound(idOrName string) error {
	return refuse(ErrNotFound, "isolated_device %s not found", idOrName)
}

// withDetails fills d's details, as a Cloudpods show has them: its host's
// name, its vendor (from vendor_device_id) and its guest (the guest's id:
// guests live outside this inventory, so GuestStatus stays empty).
func withDetails(d api.IsolatedDevice, hostName string) api.IsolatedDevice {
	d.Host, d.Vendor, d.Guest = hostName, VendorOf(d.VendorDeviceID), d.GuestID
	return d
}

// UpdateDevice changes the fields u names of the device idOrName names (see
// GetDevice) and returns it as stored, with its details.
// It may give a free device a guest or free a held one, but not move a
// device from one guest to another (ErrInUse: detach it first). The row is
// read locked and the write is conditional on the guest_id read (see
// alloc.go), so an attach or detach that commits in between is never
// overwritten with the old guest_id.
func (s *Store) UpdateDevice(ctx context.Context, idOrName string, u DeviceUpdate) (api.IsolatedDevice, error) {
	var d api.IsolatedDevice
	err := s.retryRaces(ctx, "updating isolated device "+idOrName, func() error {
		return s.inTx(ctx, false, func(tx *sql.Tx) error {
			cur, err := s.lockDevice(ctx, tx, idOrName, true)
			if err != nil {
				return err
			}
			d = cur
			if err := applyDeviceUpdate(&d, u); err != nil {
				return err
			}
			d = withDetails(d, cur.Host)
			if cur.GuestID != "" && d.GuestID != "" && d.GuestID != cur.GuestID {
				return refuse(ErrInUse, "%s %s: detach it before giving it to %s", api.MsgDeviceUsedByServer, cur.GuestID, d.GuestID)
			}
			d.UpdatedAt = s.timestamp()
			d.UpdateVersion = cur.UpdateVersion + 1
			args, err := deviceArgs(d, notUpdated...)
			if err != nil {
				return err
			}
			res, err := s.prep(tx).ExecContext(ctx, s.d.bind(`UPDATE isolated_devices SET `+deviceUpdateSet+` WHERE id = ? AND guest_id = ?`),
				append(args, d.ID, cur.GuestID)...)
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
	u.Apply(d)
	return validateDevice(*d)
}

// DeleteDevice removes the device idOrName names (see GetDevice) and
// returns it as it was. A device held by a guest (guest_id set) is kept and
// ErrNotEmpty returned with Cloudpods' message, so a host's sync never
// pulls a device from under a running guest. It never forces: that is
// PurgeDevice's.
func (s *Store) DeleteDevice(ctx context.Context, idOrName string) (api.IsolatedDevice, error) {
	d, _, err := s.removeDevice(ctx, idOrName, false, ErrNotEmpty)
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
	if err := checkDeviceLengths(d); err != nil {
		return err
	}
	if d.SharingMode != "" && !slices.Contains(api.SharingModes, d.SharingMode) {
		return refuse(ErrInvalid, "sharing_mode %q is not one of %s", d.SharingMode, strings.Join(api.SharingModes, ", "))
	}
	if d.VirtualNum < 1 {
		return refuse(ErrInvalid, "virtual_num must be at least 1")
	}
	if d.MemorySize < 0 {
		return refuse(ErrInvalid, "memory_size must not be negative")
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
