package store

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
)

// Releasing devices: detach (by id or all of a guest's) and purge. The
// concurrency rules are alloc.go's.

// DetachDevice takes the device idOrName names (see GetDevice) back from
// guest and returns it. Detaching a free device changes nothing and
// returns no device, so a retried detach succeeds; a device another guest
// holds is refused. A device pending removal is only released here:
// deleting it is left to its host's next sync, so each host's rows keep
// one writer. The row is read locked, as AttachDevice reads it.
func (s *Store) DetachDevice(ctx context.Context, guest, idOrName string) ([]api.IsolatedDevice, error) {
	if err := CheckGuestID(guest); err != nil {
		return nil, err
	}
	if s.group == nil {
		// PostgreSQL: the usual case (see below) is one conditional
		// statement, atomic on its own: one round trip instead of a
		// transaction's four (BEGIN, the read, the UPDATE, COMMIT). When it
		// changes nothing, the transaction below finds out why.
		d, ok, err := s.releaseAlone(ctx, guest, idOrName)
		switch {
		case err != nil:
			return nil, err
		case ok:
			return []api.IsolatedDevice{d}, nil
		}
	}
	var out []api.IsolatedDevice
	err := s.retryRaces(ctx, "detaching isolated device "+idOrName, func() error {
		out = nil
		return s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			// The usual case first, in one statement: idOrName is the id
			// of a device guest holds (an id names its row before any
			// name does, see GetDevice).
			now := s.timestamp()
			d, ok, err := s.updateReturning(ctx, tx, releaseReturningStmt, "detaching isolated device "+idOrName, formatTime(now), idOrName, guest)
			if err != nil {
				return err
			}
			if ok {
				out = append(out, d)
				return nil
			}
			d, err = s.lockDevice(ctx, tx, idOrName, false)
			if err != nil {
				return err
			}
			n, err := s.release(ctx, tx, guest, d.ID, now)
			switch {
			case err != nil:
				return err
			case n == 1:
				d.GuestID, d.UpdatedAt = "", now
				out = append(out, d)
				return nil
			case d.GuestID == "":
				return nil
			case d.GuestID != guest:
				return refuse(ErrInUse, "%s %s, not by %s", api.MsgDeviceUsedByServer, d.GuestID, guest)
			}
			return errRace
		})
	})
	return out, err
}

// releaseAlone is the usual detach as a statement of its own, bounded as a
// transaction is.
func (s *Store) releaseAlone(ctx context.Context, guest, idOrName string) (api.IsolatedDevice, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, txTimeout)
	defer cancel()
	return s.updateReturning(ctx, s.db, releaseReturningStmt, "detaching isolated device "+idOrName,
		formatTime(s.timestamp()), idOrName, guest)
}

// DetachAll takes back every device guest holds and returns them in
// creation order; none is not an error.
//
// It is one statement (detachAllStmt): its subquery locks the guest's rows
// in id order, as every statement that locks several device rows does (see
// alloc.go), and PostgreSQL's counter trigger (migration 0004) then updates
// the counters of all of them at once, in key order. Releasing the rows one
// statement at a time would lock counter rows in device order instead,
// which two guests spread over two hosts could take in opposite orders.
func (s *Store) DetachAll(ctx context.Context, guest string) ([]api.IsolatedDevice, error) {
	if err := CheckGuestID(guest); err != nil {
		return nil, err
	}
	type released struct {
		d   api.IsolatedDevice
		seq int64
	}
	var out []released
	err := s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		out = nil
		rows, err := s.prep(tx).QueryContext(ctx, s.d.bind(fmt.Sprintf(detachAllStmt, s.d.forUpdate())),
			formatTime(s.timestamp()), guest, guest)
		if err != nil {
			return fmt.Errorf("detaching the devices of guest %s: %w", guest, err)
		}
		defer rows.Close()
		for rows.Next() {
			d, seq, err := scanDeviceSeq(rows, false)
			if err != nil {
				return fmt.Errorf("detaching the devices of guest %s: %w", guest, err)
			}
			out = append(out, released{d, seq})
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b released) int { return cmp.Compare(a.seq, b.seq) })
	devs := make([]api.IsolatedDevice, len(out))
	for i, r := range out {
		devs[i] = r.d
	}
	return devs, nil
}

// release frees device id if guest holds it, stamping it updated at now;
// it returns the row count.
func (s *Store) release(ctx context.Context, tx *sql.Tx, guest, id string, now time.Time) (int64, error) {
	res, err := s.prep(tx).ExecContext(ctx, s.d.bind(releaseStmt), formatTime(now), id, guest)
	if err != nil {
		return 0, fmt.Errorf("detaching isolated device %s: %w", id, err)
	}
	return rowsAffected(res)
}

// PurgeDevice removes the device idOrName names (see GetDevice) and returns
// it as it was. A device a guest holds is refused (ErrInUse, "Isolated
// device used by server") unless force is set; then it is detached and
// removed, and detachedGuest names the guest that held it.
func (s *Store) PurgeDevice(ctx context.Context, idOrName string, force bool) (d api.IsolatedDevice, detachedGuest string, err error) {
	return s.removeDevice(ctx, idOrName, force, ErrInUse)
}

// removeDevice is PurgeDevice and DeleteDevice: without force, a held
// device is refused with the kind held.
func (s *Store) removeDevice(ctx context.Context, idOrName string, force bool, held error) (d api.IsolatedDevice, detachedGuest string, err error) {
	err = s.retryRaces(ctx, "deleting isolated device "+idOrName, func() error {
		return s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if d, err = s.lockDevice(ctx, tx, idOrName, false); err != nil {
				return err
			}
			if d.GuestID != "" && !force {
				return refuse(held, "%s", api.MsgDeviceUsedByServer)
			}
			res, err := s.prep(tx).ExecContext(ctx, s.d.bind(`DELETE FROM isolated_devices WHERE id = ? AND guest_id = ?`), d.ID, d.GuestID)
			if err != nil {
				return fmt.Errorf("deleting isolated device %s: %w", d.ID, err)
			}
			if n, err := rowsAffected(res); err != nil || n == 0 {
				return cmp.Or(err, errRace)
			}
			return nil
		})
	})
	if err != nil {
		return api.IsolatedDevice{}, "", err
	}
	return d, d.GuestID, nil
}
