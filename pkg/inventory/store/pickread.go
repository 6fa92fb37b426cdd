package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"yunion.io/x/mps-daemon/pkg/api"
)

// The pick's read (AttachDevices). PickGPUs decides on a summary per GPU
// (free and held counts); then the pick takes the lowest seq free slices of
// the GPUs chosen. How the store reads it depends on the backend:
//
//   - SQLite reads the summary from the per-GPU counters of migration 0007
//     (pickSummaryQuery: a few rows per host), then only the free slices
//     the pick takes (pickFirstFreeQuery: one seek per GPU chosen). Nothing
//     is locked: the write transaction holds the only write lock.
//   - PostgreSQL first locks the host's row (pickHostLockQuery), so that
//     attaches on one host queue instead of picking the same rows and
//     racing (the conditional claims stay the guarantee, see alloc.go),
//     then has the database compute the summary from an index of the
//     claimable rows per GPU (pgPickSummaryQuery), the first free ids of
//     each GPU included: one row per GPU and slice a pick may take.
//
// Before, both read every free row of the host's model into Go (on
// PostgreSQL locking each, one WAL record per row): the largest item of
// an attach's cost (docs/benchmarks.md, issue 22).

// pickSummaryQuery reads, for a (host, dev_type, model), the free slices
// per GPU (from the counters: a row per GPU, or a few where a GPU's slices
// differ in NUMA node or sharing mode) and one row per slice the guest
// holds (usually none: from the guest_id index, the other columns
// filtering its few rows; named, since statistics of a table whose rows
// are mostly free make any guest_id look common, and the planner would
// then read every slice of the host, or the table); pickSummary adds them
// up per GPU. %s are the counters' further conditions (numaCond, sharingCond).
// Its arguments: host id, dev_type, model, those of %s, then host id,
// dev_type, model, guest.
//
// The guest is compared as CAST(? AS TEXT) rather than as a bare `?`: the
// planner, weighing the partial index isolated_devices_free_model (the
// rows of an empty guest_id), would look at the bound value, and SQLite then prepares
// the statement again on every new binding (as it does for a bare
// LIMIT ?, hence pickFirstFreeQuery's literal limit).
const pickSummaryQuery = `SELECT device_path, free, 0 FROM isolated_device_gpus
		WHERE host_id = ? AND dev_type = ? AND model = ? AND free > 0%s
	UNION ALL
	SELECT device_path, 0, 1 FROM isolated_devices INDEXED BY isolated_devices_guest_id
		WHERE host_id = ? AND dev_type = ? AND model = ? AND guest_id = CAST(? AS TEXT)`

// pickFirstFreeQuery reads the ids of the first (lowest seq) free slices
// of one GPU: a range of the partial index isolated_devices_free_gpu
// (migration 0007), in its order. The first %s are
// the further conditions as in pickSummaryQuery, the %d how many (a
// literal, see pickSummaryQuery). Its arguments: host id, dev_type, model,
// device_path, those of %s.
const pickFirstFreeQuery = `SELECT id FROM isolated_devices
	WHERE host_id = ? AND dev_type = ? AND model = ? AND guest_id = '' AND device_path = ?
		AND NOT unhealthy AND NOT pending_removal%s
	ORDER BY seq LIMIT %d`

// The further conditions of a pick on one NUMA node, of one sharing mode
// (a row without a sharing mode, as this project's daemon registers them,
// matches any).
const (
	numaCond    = ` AND numa_node = ?`
	sharingCond = ` AND sharing_mode IN ('', ?)`
)

// pickHostQuery (SQLite) is the id of the host named by id or name (an id
// first), as getHost finds it: two index seeks, the name's only when no id
// matches (SQLite runs a UNION ALL's parts in their order and stops at the
// LIMIT). Its arguments: the id or name, twice. It was pickHostLockQuery's
// OR, which SQLite answered from both indexes and sorted: twice the time
// (docs/benchmarks.md, issue 22, round 5).
const pickHostQuery = `SELECT id FROM hosts WHERE id = ? UNION ALL SELECT id FROM hosts WHERE name = ? LIMIT 1`

// pickHostLockQuery (PostgreSQL) is the host's id as pickHostQuery finds
// it, locking the row (a UNION cannot lock). FOR NO KEY UPDATE conflicts
// with itself and with lockHost's FOR UPDATE, not with the FOR KEY SHARE a
// device insert's foreign key check takes, so host syncs are not held up
// by attaches. Lock order: the host, then device rows (the claims), then
// counter rows (their trigger), as lockHost's writers do. Its arguments:
// the id or name, three times.
const pickHostLockQuery = `SELECT id FROM hosts WHERE id = ? OR name = ? ORDER BY CASE WHEN id = ? THEN 0 ELSE 1 END LIMIT 1 FOR NO KEY UPDATE`

// pgPickSummaryQuery (PostgreSQL) reads, for a (host, dev_type, model),
// one row per free slice that a pick of count devices may take (the first
// count of each GPU, in seq order, with its rank and its GPU's free
// count), then one row per slice the guest holds. Both free parts are
// ranges of isolated_devices_free_gpu (migration 0009: the claimable rows
// in (device_path, seq) order per host, dev_type and model): the counts
// per GPU one ordered range, grouped without a sort, the first slices of
// each GPU a seek (LATERAL ... ORDER BY seq LIMIT). The guest's rows come
// from its guest_id index. The two %s are the free rows' further
// conditions (numaCond, sharingCond), the same twice: use pgPickSummary.
// Its arguments are pgPickSummaryArgs.
//
// Until round 4 (docs/benchmarks.md, issue 22) it numbered every free row
// of the host with window functions over the pick index's range, which
// PostgreSQL sorted by (device_path, seq) first: the largest statement of
// a pair.
const pgPickSummaryQuery = `SELECT g.device_path, f.id, f.r, g.n, 0 FROM (
		SELECT device_path, COUNT(*) AS n FROM isolated_devices
		WHERE host_id = ? AND dev_type = ? AND model = ? AND guest_id = ''
			AND NOT unhealthy AND NOT pending_removal%s
		GROUP BY device_path
	) AS g CROSS JOIN LATERAL (
		SELECT id, ROW_NUMBER() OVER (ORDER BY seq) AS r FROM (
			SELECT id, seq FROM isolated_devices
			WHERE host_id = ? AND dev_type = ? AND model = ? AND device_path = g.device_path
				AND guest_id = '' AND NOT unhealthy AND NOT pending_removal%s
			ORDER BY seq LIMIT ?
		) AS first
	) AS f
	UNION ALL
	SELECT device_path, '', 0, 0, 1 FROM isolated_devices
		WHERE host_id = ? AND dev_type = ? AND model = ? AND guest_id = ?`

// pgPickSummary is pgPickSummaryQuery with the further conditions conds.
func pgPickSummary(conds string) string {
	return fmt.Sprintf(pgPickSummaryQuery, conds, conds)
}

// pgPickSummaryArgs are pgPickSummaryQuery's arguments: host id, dev_type,
// model and the further conditions' arguments (twice), count, then host
// id, dev_type, model, guest.
func pgPickSummaryArgs(hostID, guest string, r api.AttachRequest, condArgs []any) []any {
	args := make([]any, 0, 2*(3+len(condArgs))+5)
	for range 2 {
		args = append(args, hostID, r.DevType, r.Model)
		args = append(args, condArgs...)
	}
	return append(args, r.Count, hostID, r.DevType, r.Model, guest)
}

// pick chooses r.Count devices of r for guest on NUMA node numa (see
// Pick), reading what it needs in tx. It returns the chosen ids in pick
// order, or none and how many are free; a host r.Host does not name is
// ErrNotFound.
func (s *Store) pick(ctx context.Context, tx *sql.Tx, guest string, r api.AttachRequest, numa int) (ids []string, free int, err error) {
	hostQuery, hostArgs := pickHostQuery, []any{r.Host, r.Host}
	if s.d.forUpdate() != "" {
		hostQuery, hostArgs = pickHostLockQuery, []any{r.Host, r.Host, r.Host}
	}
	var hostID string
	err = s.prep(tx).QueryRowContext(ctx, s.d.bind(hostQuery), hostArgs...).Scan(&hostID)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, 0, refuse(ErrNotFound, "host %q not found", r.Host)
	case err != nil:
		return nil, 0, fmt.Errorf("reading host %s: %w", r.Host, err)
	}
	conds, condArgs := pickConds(r, numa)
	if s.d.forUpdate() != "" {
		return s.pgPick(ctx, tx, hostID, guest, r, conds, condArgs)
	}
	gpus, err := s.pickSummary(ctx, tx, hostID, guest, r, conds, condArgs)
	if err != nil {
		return nil, 0, err
	}
	picks, free := PickGPUs(gpus, r.Count)
	if picks == nil {
		return nil, free, nil
	}
	freeIDs := make([][]string, len(gpus))
	for i, n := range taken(picks, len(gpus)) {
		if n == 0 {
			continue
		}
		if freeIDs[i], err = s.firstFree(ctx, tx, hostID, r, gpus[i].Path, n, conds, condArgs); err != nil {
			return nil, 0, err
		}
	}
	return takeInOrder(picks, freeIDs), free, nil
}

// pickSummary runs pickSummaryQuery: one GPUSlots per GPU that has free
// slices or slices of the guest, in no particular order.
func (s *Store) pickSummary(ctx context.Context, tx *sql.Tx, hostID, guest string, r api.AttachRequest, conds string, condArgs []any) ([]GPUSlots, error) {
	args := append([]any{hostID, r.DevType, r.Model}, condArgs...)
	args = append(args, hostID, r.DevType, r.Model, guest)
	rows, err := s.prep(tx).QueryContext(ctx, s.d.bind(fmt.Sprintf(pickSummaryQuery, conds)), args...)
	if err != nil {
		return nil, fmt.Errorf("reading the free devices per GPU: %w", err)
	}
	defer rows.Close()
	var gpus []GPUSlots
	for rows.Next() {
		var path string
		var free, held int
		if err := rows.Scan(&path, &free, &held); err != nil {
			return nil, fmt.Errorf("reading the free devices per GPU: %w", err)
		}
		i := slices.IndexFunc(gpus, func(g GPUSlots) bool { return g.Path == path })
		if i < 0 {
			i = len(gpus)
			gpus = append(gpus, GPUSlots{Path: path})
		}
		gpus[i].Free += free
		gpus[i].Held += held
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the free devices per GPU: %w", err)
	}
	return gpus, nil
}

// firstFree reads the ids of the n first free slices of GPU path; the
// counters said it has at least n, and the transaction sees what they saw.
func (s *Store) firstFree(ctx context.Context, tx *sql.Tx, hostID string, r api.AttachRequest, path string, n int, conds string, condArgs []any) ([]string, error) {
	args := append([]any{hostID, r.DevType, r.Model, path}, condArgs...)
	rows, err := s.prep(tx).QueryContext(ctx, s.d.bind(fmt.Sprintf(pickFirstFreeQuery, conds, n)), args...)
	if err != nil {
		return nil, fmt.Errorf("reading the free devices of GPU %s: %w", path, err)
	}
	defer rows.Close()
	ids := make([]string, 0, n)
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("reading the free devices of GPU %s: %w", path, err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the free devices of GPU %s: %w", path, err)
	}
	if len(ids) < n {
		return nil, fmt.Errorf("reading the free devices of GPU %s: %d found, the counters say %d or more", path, len(ids), n)
	}
	return ids, nil
}

// pickConds are the further conditions of a pick (numaCond, sharingCond)
// and their arguments.
func pickConds(r api.AttachRequest, numa int) (conds string, condArgs []any) {
	if numa != AnyNUMANode {
		conds, condArgs = conds+numaCond, append(condArgs, numa)
	}
	if r.SharingMode != "" {
		conds, condArgs = conds+sharingCond, append(condArgs, r.SharingMode)
	}
	return conds, condArgs
}

// pgPick is pick's end on PostgreSQL: one statement reads the summary and
// the first free ids of each GPU (pgPickSummaryQuery).
func (s *Store) pgPick(ctx context.Context, tx *sql.Tx, hostID, guest string, r api.AttachRequest, conds string, condArgs []any) (ids []string, free int, err error) {
	rows, err := s.prep(tx).QueryContext(ctx, s.d.bind(pgPickSummary(conds)), pgPickSummaryArgs(hostID, guest, r, condArgs)...)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the free devices per GPU: %w", err)
	}
	defer rows.Close()
	return pgPickFrom(rows, r.Count)
}

// scanRows is what pgPickFrom reads: *sql.Rows, or pgx's Rows (pgAttach).
type scanRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// pgPickFrom reads pgPickSummaryQuery's rows and picks count devices from
// them (see pick).
func pgPickFrom(rows scanRows, count int) (ids []string, free int, err error) {
	var gpus []GPUSlots
	var freeIDs [][]string
	for rows.Next() {
		var path, id string
		var rank, n, held int
		if err := rows.Scan(&path, &id, &rank, &n, &held); err != nil {
			return nil, 0, fmt.Errorf("reading the free devices per GPU: %w", err)
		}
		i := slices.IndexFunc(gpus, func(g GPUSlots) bool { return g.Path == path })
		if i < 0 {
			i = len(gpus)
			gpus = append(gpus, GPUSlots{Path: path})
			freeIDs = append(freeIDs, nil)
		}
		if held > 0 {
			gpus[i].Held += held
			continue
		}
		gpus[i].Free = n
		// The ranks of a GPU run 1..min(n, count), in any row order.
		if len(freeIDs[i]) < rank {
			freeIDs[i] = append(freeIDs[i], make([]string, rank-len(freeIDs[i]))...)
		}
		freeIDs[i][rank-1] = id
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("reading the free devices per GPU: %w", err)
	}
	picks, free := PickGPUs(gpus, count)
	if picks == nil {
		return nil, free, nil
	}
	return takeInOrder(picks, freeIDs), free, nil
}
