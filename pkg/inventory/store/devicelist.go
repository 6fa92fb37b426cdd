package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"yunion.io/x/mps-daemon/pkg/api"
)

// DeviceFilter selects isolated devices for ListDevices. Empty strings and
// false match everything. Limit 0 returns no rows (only the total);
// negative values are refused.
type DeviceFilter struct {
	// HostID is a host's id or name. An unknown host is ErrNotFound, so a
	// mistyped --host is not mistaken for a host without devices.
	HostID  string
	DevType string
	Model   string
	Addr    string
	// DevicePath is the physical GPU (its UUID for MPS): climc's --gpu.
	DevicePath string
	GuestID    string
	// Unused keeps the devices no guest holds (Cloudpods' meaning: an
	// unhealthy or pending_removal device with no guest is "unused" too).
	Unused bool
	// Unhealthy and PendingRemoval, when set, keep the devices whose flag
	// has that value.
	Unhealthy, PendingRemoval *bool
	// Details fills Host (the host's name). Guest and GuestStatus stay
	// empty: guests live outside this inventory.
	Details       bool
	Limit, Offset int
}

// where builds the WHERE clause shared by the count and the page query.
func (f DeviceFilter) where(hostID string) (string, []any) {
	var conds []string
	var args []any
	add := func(cond string, v any) {
		conds = append(conds, cond)
		args = append(args, v)
	}
	if hostID != "" {
		add("d.host_id = ?", hostID)
	}
	for _, c := range []struct{ col, v string }{
		{"d.dev_type", f.DevType}, {"d.model", f.Model}, {"d.addr", f.Addr},
		{"d.device_path", f.DevicePath}, {"d.guest_id", f.GuestID},
	} {
		if c.v != "" {
			add(c.col+" = ?", c.v)
		}
	}
	if f.Unused {
		conds = append(conds, "d.guest_id = ''")
	}
	for _, c := range []struct {
		col string
		v   *bool
	}{{"d.unhealthy", f.Unhealthy}, {"d.pending_removal", f.PendingRemoval}} {
		switch {
		case c.v == nil:
		case *c.v:
			conds = append(conds, c.col)
		default:
			conds = append(conds, "NOT "+c.col)
		}
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// ListDevices returns one page of the devices f selects, in creation order,
// and how many match in all. Count and page come from one snapshot.
func (s *Store) ListDevices(ctx context.Context, f DeviceFilter) ([]api.IsolatedDevice, int, error) {
	if err := checkPage(f.Limit, f.Offset); err != nil {
		return nil, 0, err
	}
	var devs []api.IsolatedDevice
	var total int
	err := s.inTx(ctx, true, func(tx *sql.Tx) error {
		var hostID string
		if f.HostID != "" {
			h, err := s.getHost(ctx, tx, f.HostID)
			if err != nil {
				return err
			}
			hostID = h.ID
		}
		where, args := f.where(hostID)
		err := tx.QueryRowContext(ctx, s.d.bind(`SELECT COUNT(*) FROM isolated_devices d`+where), args...).Scan(&total)
		if err != nil {
			return fmt.Errorf("counting isolated devices: %w", err)
		}
		if f.Limit == 0 || f.Offset >= total {
			return nil
		}
		rows, err := tx.QueryContext(ctx, s.d.bind(`SELECT `+deviceColumns+deviceFrom+where+` ORDER BY d.seq LIMIT ? OFFSET ?`),
			append(args, f.Limit, f.Offset)...)
		if err != nil {
			return fmt.Errorf("listing isolated devices: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			d, err := scanDevice(rows, f.Details)
			if err != nil {
				return fmt.Errorf("reading isolated device row: %w", err)
			}
			devs = append(devs, d)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, 0, err
	}
	return devs, total, nil
}
