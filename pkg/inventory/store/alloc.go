package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
)

// How attaching and detaching stay correct under concurrency, on both
// backends:
//
// Every write that hands a device to a guest, takes it back or removes it is
// a conditional statement that re-states what it read: attach is
// `UPDATE ... SET guest_id = G WHERE id = ? AND guest_id = '' AND NOT
// unhealthy AND NOT pending_removal`, detach `... WHERE id = ? AND guest_id
// = G`, a delete `... WHERE id = ? AND guest_id = <what was read>`. The
// statement's row count says whether the row was still as read.
//
//   - SQLite: write transactions start with BEGIN IMMEDIATE (see store.go),
//     so they run one at a time and the read and the write see the same
//     rows; the condition always holds.
//   - PostgreSQL, READ COMMITTED: two transactions may read the same free
//     row. The first UPDATE locks it; the second waits for the first to
//     commit, then re-evaluates its WHERE on the committed row, finds
//     guest_id no longer '' and changes nothing (row count 0).
//
// A request that names one device (attach, detach, update, delete) reads
// that row locked first (lockDevice: it may be named by its name), so its
// conditional write finds the row as read.
//
// A count that falls short means another writer got there first: the
// transaction rolls back, nothing of it remains, and the whole read-decide-
// write runs again on fresh rows (errRace, retryRaces). A multi-device
// attach checks every claim before it commits, so a request for count
// devices gets all of them or none.
//
// The picker is deterministic, so concurrent model-form attaches on one
// (host, dev_type, model) would all pick the same rows and all but one lose
// and retry. On PostgreSQL the pick therefore first locks the host's row
// (FOR NO KEY UPDATE, see pickread.go): such attaches queue instead, as they
// do on SQLite, and the conditional claims stay as the guarantee. The pick's
// read is a statement of its own after the lock, so under READ COMMITTED it
// sees what the attach before it committed. Every statement that locks
// several device rows locks them in ascending id order (the picked rows
// before their claims, see lockPickedQuery; detach-all), device rows before
// counter rows, and a transaction that locks a host locks it before any
// device row, so two transactions never wait for each other in a cycle.

// Refusals of allocation. Both are kinds of ErrInUse; the server answers
// each with its own status (see answerFor in pkg/inventory/server).
var (
	// ErrNoCapacity: fewer free devices than asked for, or a device that is
	// unhealthy or pending removal.
	ErrNoCapacity = fmt.Errorf("%w: no free device", ErrInUse)
	// ErrContention: the rows kept changing under the request; it may
	// succeed if sent again.
	ErrContention = fmt.Errorf("%w: contention", ErrInUse)
)

// errRace: a conditional write found its row changed since it was read.
var errRace = errors.New("row changed concurrently")

const (
	// raceAttempts bounds retryRaces: many more losses in a row mean a
	// storm of writers on the same rows, better told to the client.
	raceAttempts = 10
	// raceBackoff is the first retry's upper bound; attempt n waits up to
	// n times it, at random, so the losers do not collide again in step.
	raceBackoff = 2 * time.Millisecond
	// MaxAttachCount bounds one model-form attach.
	MaxAttachCount = 128
	// claimable is the condition under which a device may be handed out.
	claimable = ` AND guest_id = '' AND NOT unhealthy AND NOT pending_removal`
)

// The statements of allocation that must be served by an index (the tests
// EXPLAIN them on both backends). The pick's own are in pickread.go.
var (
	claimStmt = `UPDATE isolated_devices SET guest_id = ?, updated_at = ? WHERE id = ?` + claimable
	// claimReturningStmt is claimStmt answering the claimed row, so that
	// the attach need not read it again.
	claimReturningStmt = claimStmt + ` RETURNING ` + returningColumns
	// releaseReturningStmt is releaseStmt answering the released row.
	releaseReturningStmt = releaseStmt + ` RETURNING ` + returningColumns
	releaseStmt          = `UPDATE isolated_devices SET guest_id = '', updated_at = ? WHERE id = ? AND guest_id = ?`
	// detachAllStmt frees every row of a guest (updated_at, guest, guest);
	// %s is the dialect's row lock (see DetachAll).
	detachAllStmt = `UPDATE isolated_devices SET guest_id = '', updated_at = ?
		WHERE guest_id = ? AND id IN (SELECT id FROM isolated_devices WHERE guest_id = ? ORDER BY id%s)
		RETURNING ` + returningColumns
)

// guestPattern is what a guest id may look like: container and pod ids,
// UUIDs, names like `ns:pod`.
var guestPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// CheckGuestID refuses a guest id the API does not accept, with a message
// naming the field.
func CheckGuestID(guest string) error {
	if !guestPattern.MatchString(guest) {
		return refuse(ErrInvalid, "guest: %q is not a guest id (1 to 128 characters of A-Z a-z 0-9 . _ : -)", guest)
	}
	return nil
}

// normalizeAttach fills r's defaults and checks it; numa is AnyNUMANode
// when r names no node.
func normalizeAttach(r api.AttachRequest) (api.AttachRequest, int, error) {
	if r.DevType == "" {
		r.DevType = api.DevTypeNvidiaMPS
	}
	if r.Count == 0 {
		r.Count = 1
	}
	numa := AnyNUMANode
	if r.NUMANode != nil {
		numa = *r.NUMANode
	}
	switch {
	case r.Model == "":
		return r, 0, missing("model")
	case r.Host == "":
		return r, 0, missing("host")
	case r.Count < 1 || r.Count > MaxAttachCount:
		return r, 0, refuse(ErrInvalid, "count: must be between 1 and %d", MaxAttachCount)
	case numa < AnyNUMANode:
		return r, 0, refuse(ErrInvalid, "numa_node: must be -1 (any) or a node number")
	}
	return r, numa, nil
}

// AttachDevice gives the device idOrName names (see GetDevice) to guest.
// A device the guest already holds is answered as attached (a retried
// request succeeds); one that another guest holds, or that is unhealthy or
// pending removal, is refused. The row is read locked (lockDevice), so the
// claim finds it as read and the answer is that row with its guest set.
func (s *Store) AttachDevice(ctx context.Context, guest, idOrName string) (api.IsolatedDevice, error) {
	if err := CheckGuestID(guest); err != nil {
		return api.IsolatedDevice{}, err
	}
	var d api.IsolatedDevice
	err := s.retryRaces(ctx, "attaching isolated device "+idOrName, func() error {
		return s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			cur, err := s.lockDevice(ctx, tx, idOrName, false)
			if err != nil {
				return err
			}
			now := s.timestamp()
			n, err := s.claim(ctx, tx, guest, cur.ID, now)
			if err != nil {
				return err
			}
			d = cur
			if n == 0 {
				return notClaimable(cur, guest)
			}
			d.GuestID, d.UpdatedAt = guest, now
			return nil
		})
	})
	if err != nil {
		return api.IsolatedDevice{}, err
	}
	return d, nil
}

// AttachDevices picks r.Count free devices (see Pick) and gives them all to
// guest, or refuses and gives none. They are returned in pick order.
func (s *Store) AttachDevices(ctx context.Context, guest string, r api.AttachRequest) ([]api.IsolatedDevice, error) {
	if err := CheckGuestID(guest); err != nil {
		return nil, err
	}
	r, numa, err := normalizeAttach(r)
	if err != nil {
		return nil, err
	}
	var out []api.IsolatedDevice
	err = s.retryRaces(ctx, "attaching isolated devices", func() error {
		out = out[:0]
		if s.d.name == "postgres" {
			// The same statements, pipelined (pgattach.go).
			var err error
			out, err = s.pgAttach(ctx, guest, r, numa)
			return err
		}
		return s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			ids, free, err := s.pick(ctx, tx, guest, r, numa)
			if err != nil {
				return err
			}
			if ids == nil {
				return noCapacity(r, numa, free)
			}
			// SQLite: the write transaction already holds the only write
			// lock; PostgreSQL's attach (pgattach.go) locks the rows first.
			sorted := slices.Sorted(slices.Values(ids))
			claimed := make(map[string]api.IsolatedDevice, len(ids))
			now := s.timestamp()
			for _, id := range sorted {
				d, ok, err := s.claimReturning(ctx, tx, guest, id, now)
				if err != nil {
					return err
				}
				if !ok {
					return errRace
				}
				claimed[id] = d
			}
			for _, id := range ids {
				out = append(out, claimed[id])
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// noCapacity is the refusal of a pick that found too few free devices.
func noCapacity(r api.AttachRequest, numa, free int) error {
	where := "host " + r.Host
	if numa != AnyNUMANode {
		where += fmt.Sprintf(" NUMA node %d", numa)
	}
	return refuse(ErrNoCapacity, "need %d free %s %q devices on %s, %d free", r.Count, r.DevType, r.Model, where, free)
}

// claim hands device id to guest if it is claimable, stamping it updated
// at now; it returns the row count (0 or 1).
func (s *Store) claim(ctx context.Context, tx *sql.Tx, guest, id string, now time.Time) (int64, error) {
	res, err := s.prep(tx).ExecContext(ctx, s.d.bind(claimStmt), guest, formatTime(now), id)
	if err != nil {
		return 0, fmt.Errorf("attaching isolated device %s: %w", id, err)
	}
	return rowsAffected(res)
}

// claimReturning is claim answering the claimed row; ok is false when the
// row was not claimable.
func (s *Store) claimReturning(ctx context.Context, tx *sql.Tx, guest, id string, now time.Time) (d api.IsolatedDevice, ok bool, err error) {
	return s.updateReturning(ctx, tx, claimReturningStmt, "attaching isolated device "+id, guest, formatTime(now), id)
}

// updateReturning runs an UPDATE of at most one device row that answers
// the row (RETURNING returningColumns); ok says whether it changed one.
func (s *Store) updateReturning(ctx context.Context, q querier, stmt, what string, args ...any) (d api.IsolatedDevice, ok bool, err error) {
	rows, err := s.prep(q).QueryContext(ctx, s.d.bind(stmt), args...)
	if err != nil {
		return d, false, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	if rows.Next() {
		if d, _, err = scanDeviceSeq(rows, false); err != nil {
			return d, false, fmt.Errorf("%s: %w", what, err)
		}
		ok = true
	}
	if err := rows.Err(); err != nil {
		return api.IsolatedDevice{}, false, fmt.Errorf("%s: %w", what, err)
	}
	return d, ok, nil
}

// notClaimable says why d, as read before a claim that changed nothing,
// cannot go to guest: nil when guest holds it already, errRace when it
// looks free (another writer changed it in between).
func notClaimable(d api.IsolatedDevice, guest string) error {
	switch {
	case d.GuestID == guest:
		return nil
	case d.GuestID != "":
		return refuse(ErrInUse, "%s %s", api.MsgDeviceUsedByServer, d.GuestID)
	case d.PendingRemoval:
		return refuse(ErrNoCapacity, "isolated device %s is pending removal: its host no longer offers it", d.ID)
	case d.Unhealthy:
		return refuse(ErrNoCapacity, "isolated device %s is unhealthy: its GPU's MPS is not serving", d.ID)
	}
	return errRace
}

// retryRaces runs fn until it returns something other than errRace, at most
// raceAttempts times, with a short random backoff in between.
func (s *Store) retryRaces(ctx context.Context, what string, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if !errors.Is(err, errRace) {
			return err
		}
		if attempt == raceAttempts {
			s.log.Warn("giving up on rows that keep changing", "op", what, "attempts", attempt)
			return refuse(ErrContention, "%s: contention, try again", what)
		}
		t := time.NewTimer(rand.N(raceBackoff*time.Duration(attempt)) + 1)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}

func rowsAffected(res sql.Result) (int64, error) {
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("reading row count: %w", err)
	}
	return n, nil
}
