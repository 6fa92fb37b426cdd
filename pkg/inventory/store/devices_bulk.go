package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"yunion.io/x/mps-daemon/pkg/api"
)

// MaxCreateDevices bounds one CreateDevices call (api.MaxCreateDevices,
// the bulk create's cap): its rows go in one INSERT statement, whose
// placeholders both backends cap (SQLite at 32766).
const MaxCreateDevices = api.MaxCreateDevices

// CreateDevices adds devs, all or none, in their order (which is their
// list order, as if created one by one), and returns them as stored, with
// their details: CreateDevice for many rows in one transaction (one
// commit, one fsync) and one statement. It serves POST /isolated_devices
// with a list, and loaders (cmd/mps-inventory-bench). At most
// MaxCreateDevices at once. Each row is checked as CreateDevice checks it;
// a refusal names the row by its index ("isolated_devices[3]: ..."), a
// duplicate key too, be it twice in devs or already stored. Being one
// statement, it takes PostgreSQL's counter locks (when its trigger folds
// the deltas, migration 0008) in key order like every other write.
func (s *Store) CreateDevices(ctx context.Context, devs []api.IsolatedDevice) ([]api.IsolatedDevice, error) {
	if len(devs) == 0 {
		return nil, nil
	}
	if len(devs) > MaxCreateDevices {
		return nil, refuse(ErrInvalid, "at most %d isolated devices at once, not %d", MaxCreateDevices, len(devs))
	}
	out := make([]api.IsolatedDevice, len(devs))
	now := s.timestamp()
	for i, d := range devs {
		switch {
		case d.ID != "":
			return nil, atRow(i, refuse(ErrInvalid, "id is assigned by the server"))
		case d.HostID == "":
			return nil, atRow(i, missing("host_id"))
		}
		if err := checkLen("host_id", d.HostID, api.MaxHostRefBytes); err != nil {
			return nil, atRow(i, err)
		}
		d = newDeviceDefaults(d)
		if err := validateDevice(d); err != nil {
			return nil, atRow(i, err)
		}
		d.ID = uuid.NewString()
		d.CreatedAt, d.UpdatedAt = now, now
		d.Host, d.Vendor, d.Guest, d.GuestStatus = "", "", "", ""
		out[i] = d
	}
	err := s.inTx(ctx, false, func(tx *sql.Tx) error {
		hosts := map[string]api.Host{} // as given -> host
		seen := make(map[rowKey]int, len(out))
		args := make([]any, 0, deviceInsertCount*len(out))
		nanos := s.now().UnixNano()
		for i := range out {
			h, ok := hosts[out[i].HostID]
			if !ok {
				var err error
				if h, err = s.getHost(ctx, tx, out[i].HostID); err != nil {
					return atRow(i, err)
				}
				hosts[out[i].HostID] = h
			}
			out[i].HostID = h.ID
			if j, twice := seen[keyOf(out[i])]; twice {
				return atRow(i, refuse(ErrDuplicate, "isolated device with vendor_device_id %s and addr %s is isolated_devices[%d] too",
					out[i].VendorDeviceID, out[i].Addr, j))
			}
			seen[keyOf(out[i])] = i
			if out[i].Name == "" {
				out[i].Name = generatedName(h.Name, nanos+int64(i))
			}
			out[i] = withDetails(out[i], h.Name)
			a, err := deviceArgs(out[i], notInserted...)
			if err != nil {
				return err
			}
			args = append(args, a...)
		}
		values := strings.TrimSuffix(strings.Repeat(deviceInsertPlaceholders+", ", len(out)), ", ")
		_, err := tx.ExecContext(ctx, s.d.bind(`INSERT INTO isolated_devices (`+deviceInsertColumns+`) VALUES `+values), args...)
		return err
	})
	if err == nil {
		return out, nil
	}
	var refusal *Error
	if errors.As(err, &refusal) {
		return nil, err
	}
	if errors.Is(s.d.constraint(err), ErrDuplicate) {
		return nil, s.existingRow(ctx, out, err)
	}
	return nil, fmt.Errorf("creating %d isolated devices: %w", len(out), s.deviceWriteError(err, out[0]))
}

// rowKey is what no two device rows share: (host_id, vendor_device_id,
// addr), the unique key of isolated_devices.
type rowKey struct{ host, vendorDeviceID, addr string }

func keyOf(d api.IsolatedDevice) rowKey { return rowKey{d.HostID, d.VendorDeviceID, d.Addr} }

// atRow names row i of a batch in err: "isolated_devices[i]: ..." (the
// request's field), keeping its kind.
func atRow(i int, err error) error {
	var refusal *Error
	if errors.As(err, &refusal) {
		return refuse(refusal.Kind, "isolated_devices[%d]: %s", i, refusal.Msg)
	}
	return fmt.Errorf("isolated_devices[%d]: %w", i, err)
}

// existingRow is the refusal of a batch whose INSERT broke the unique key
// (insertErr): which row it was is not in the error, so the stored rows
// are asked, in the batch's order, after the failed transaction.
func (s *Store) existingRow(ctx context.Context, out []api.IsolatedDevice, insertErr error) error {
	for i, d := range out {
		var one int
		err := s.prep(s.db).QueryRowContext(ctx, s.d.bind(`SELECT 1 FROM isolated_devices WHERE host_id = ? AND vendor_device_id = ? AND addr = ?`),
			d.HostID, d.VendorDeviceID, d.Addr).Scan(&one)
		switch {
		case err == nil:
			return atRow(i, s.deviceWriteError(insertErr, d))
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("creating %d isolated devices: %w (finding the existing one: %v)", len(out), s.deviceWriteError(insertErr, out[0]), err)
		}
	}
	// Created and removed again since the INSERT.
	return refuse(ErrDuplicate, "one of the %d isolated devices already existed on its host", len(out))
}

// Analyze refreshes the query planner's statistics. PostgreSQL's autovacuum
// does it by itself some time after a large change; a loader that has just
// filled a database calls it so that the plans it measures are the ones
// the database settles on. SQLite is left alone: its planner picks the
// list statements' indexes without statistics (and a production database
// never has any).
func (s *Store) Analyze(ctx context.Context) error {
	if s.d.name != "postgres" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, migrationTimeout)
	defer cancel()
	if _, err := s.db.ExecContext(ctx, `ANALYZE`); err != nil {
		return fmt.Errorf("analyzing the database: %w", err)
	}
	return nil
}
