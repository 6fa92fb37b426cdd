package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"yunion.io/x/mps-daemon/pkg/api"
)

// MaxCreateDevices bounds one CreateDevices call: its rows go in one INSERT
// statement, whose placeholders both backends cap (SQLite at 32766).
const MaxCreateDevices = 1000

// CreateDevices adds devs, all or none, in their order (which is their
// list order), and returns them as stored: CreateDevice for many rows at
// the cost of one statement, for loading a large inventory (see
// cmd/mps-inventory-bench). At most MaxCreateDevices at once. Being one
// statement, it takes PostgreSQL's counter locks (when its trigger folds
// the deltas, migration 0008) in key order like every other write.
func (s *Store) CreateDevices(ctx context.Context, devs []api.IsolatedDevice) ([]api.IsolatedDevice, error) {
	if len(devs) == 0 {
		return nil, nil
	}
	if len(devs) > MaxCreateDevices {
		return nil, refuse(ErrInvalid, "at most %d devices at once, not %d", MaxCreateDevices, len(devs))
	}
	out := make([]api.IsolatedDevice, len(devs))
	now := s.timestamp()
	for i, d := range devs {
		switch {
		case d.ID != "":
			return nil, refuse(ErrInvalid, "device %d: id is assigned by the server", i)
		case d.HostID == "":
			return nil, missing("host_id")
		}
		if err := checkLen("host_id", d.HostID, api.MaxHostRefBytes); err != nil {
			return nil, err
		}
		d = newDeviceDefaults(d)
		if err := validateDevice(d); err != nil {
			return nil, err
		}
		d.ID = uuid.NewString()
		d.CreatedAt, d.UpdatedAt = now, now
		d.Host, d.Vendor, d.Guest, d.GuestStatus = "", "", "", ""
		out[i] = d
	}
	err := s.inTx(ctx, false, func(tx *sql.Tx) error {
		hosts := map[string]api.Host{} // as given -> host
		args := make([]any, 0, deviceInsertCount*len(out))
		nanos := s.now().UnixNano()
		for i := range out {
			h, ok := hosts[out[i].HostID]
			if !ok {
				var err error
				if h, err = s.getHost(ctx, tx, out[i].HostID); err != nil {
					return err
				}
				hosts[out[i].HostID] = h
			}
			out[i].HostID = h.ID
			if out[i].Name == "" {
				out[i].Name = generatedName(h.Name, nanos+int64(i))
			}
			a, err := deviceArgs(out[i], notInserted...)
			if err != nil {
				return err
			}
			args = append(args, a...)
		}
		values := strings.TrimSuffix(strings.Repeat(deviceInsertPlaceholders+", ", len(out)), ", ")
		_, err := tx.ExecContext(ctx, s.d.bind(`INSERT INTO isolated_devices (`+deviceInsertColumns+`) VALUES `+values), args...)
		if err != nil {
			// Which row broke a constraint is not known: name the first.
			return fmt.Errorf("creating %d isolated devices: %w", len(out), s.deviceWriteError(err, out[0]))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
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
