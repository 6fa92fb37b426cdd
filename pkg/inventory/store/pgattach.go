package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"yunion.io/x/mps-daemon/pkg/api"
)

// The model-form attach on PostgreSQL, pipelined. Through database/sql each
// statement of the attach's transaction is a round trip of its own: BEGIN,
// the host's lock, the summary, the claim, COMMIT; five, each waking a
// backend and this process, where the CPU of both was what bounded the
// rate (docs/benchmarks.md, issue 22). pgAttach sends the same statements,
// in the same transaction and order, as two pgx batches (pipelined: one
// network write, the answers read in order):
//
//  1. BEGIN (and pgGenericPlans), the host's lock (pickHostLockQuery) and the summary
//     (pgPickSummaryQuery). The summary needs the host's id, which the
//     request may name by its name: it is sent with the id this Store last
//     saw the lock answer for that name (pgHosts), and used only when the
//     lock, in the same transaction, answers that id again. Otherwise (the
//     first attach on a host, or a host deleted and made again under its
//     name) the summary is sent again with the id the lock answered: one
//     round trip more. The summary runs after the lock is granted, as a
//     statement of its own under READ COMMITTED: it sees what the attach
//     before it on this host committed, as before.
//  2. For one device: its claim and COMMIT. A claim that changes nothing
//     (it cannot while the host is locked; the conditional UPDATE stays the
//     guarantee) commits a transaction that changed nothing and is retried
//     as a race. For several: the rows' locks in id order and the claims,
//     then COMMIT, or ROLLBACK when a claim fell short, so a request gets all
//     its devices or none (a third round trip).
//
// The statements, their locks and their order are those of AttachDevices
// on SQLite's path (alloc.go's rules hold unchanged); pgx prepares each
// once per connection, as it does for database/sql.

// pgBegin is the attach transaction's BEGIN: READ COMMITTED, as
// postgresDialect.txOptions asks for writers.
const pgBegin = `BEGIN ISOLATION LEVEL READ COMMITTED`

// pgGenericPlans, sent after pgBegin, has the attach's prepared statements
// run on their generic plans (planned once per connection) for the rest of
// the transaction. Left to itself, PostgreSQL planned the summary
// (pgPickSummaryQuery) again on every call, its custom plans priced below
// the generic one: 0.8 ms of planning for 0.4 ms of execution
// (pg_stat_statements, docs/benchmarks.md, issue 22 round 4). The generic
// plan reads the same index (isolated_devices_free_gpu: the values bound
// change the range, not the plan), and the claims' were generic already.
const pgGenericPlans = `SET LOCAL plan_cache_mode = force_generic_plan`

// pgAttach is AttachDevices' transaction on PostgreSQL: the picked devices
// given to guest, in pick order; errRace when a claim found its row taken.
func (s *Store) pgAttach(ctx context.Context, guest string, r api.AttachRequest, numa int) ([]api.IsolatedDevice, error) {
	ctx, cancel := context.WithTimeout(ctx, txTimeout)
	defer cancel()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close()
	var out []api.IsolatedDevice
	err = conn.Raw(func(dc any) error {
		c := dc.(*stdlib.Conn).Conn()
		out, err = s.pgAttachOn(ctx, c, guest, r, numa)
		if c.PgConn().TxStatus() != 'I' {
			// An error left the transaction open: roll it back, or close
			// the connection (database/sql then drops it) so that no
			// transaction of ours outlives the request.
			if _, rerr := c.Exec(ctx, "ROLLBACK"); rerr != nil {
				_ = c.Close(context.WithoutCancel(ctx))
			}
		}
		return err
	})
	return out, err
}

// pgAttachOn runs pgAttach's batches on c.
func (s *Store) pgAttachOn(ctx context.Context, c *pgx.Conn, guest string, r api.AttachRequest, numa int) ([]api.IsolatedDevice, error) {
	conds, condArgs := pickConds(r, numa)
	summary := bindDollar(pgPickSummary(conds))
	hint, hinted := s.pgHosts.get(r.Host)
	b := &pgx.Batch{}
	b.Queue(pgBegin)
	b.Queue(pgGenericPlans)
	b.Queue(bindDollar(pickHostLockQuery), r.Host, r.Host, r.Host)
	if hinted {
		b.Queue(summary, pgPickSummaryArgs(hint, guest, r, condArgs)...)
	}
	hostID, ids, free, err := readPickBatch(c.SendBatch(ctx, b), r, hint, hinted)
	if errors.Is(err, ErrNotFound) {
		s.pgHosts.forget(r.Host)
	}
	if err != nil {
		return nil, err
	}
	if !hinted || hostID != hint {
		s.pgHosts.put(r.Host, hostID)
		rows, err := c.Query(ctx, summary, pgPickSummaryArgs(hostID, guest, r, condArgs)...)
		if err != nil {
			return nil, fmt.Errorf("reading the free devices per GPU: %w", err)
		}
		ids, free, err = pgPickFrom(rows, r.Count)
		rows.Close()
		if err != nil {
			return nil, err
		}
	}
	if ids == nil {
		return nil, noCapacity(r, numa, free)
	}
	sorted := slices.Sorted(slices.Values(ids))
	now := formatTime(s.timestamp())
	b = &pgx.Batch{}
	if len(sorted) > 1 {
		b.Queue(bindDollar(lockPickedQuery(len(sorted))), anys(sorted)...)
	}
	for _, id := range sorted {
		b.Queue(bindDollar(claimReturningStmt), guest, now, id)
	}
	if len(sorted) == 1 {
		b.Queue("COMMIT")
	}
	claimed, err := readClaimBatch(c.SendBatch(ctx, b), sorted)
	if err != nil {
		return nil, err
	}
	if len(sorted) > 1 {
		end := "COMMIT"
		if len(claimed) < len(sorted) {
			end = "ROLLBACK"
		}
		if _, err := c.Exec(ctx, end); err != nil {
			return nil, fmt.Errorf("ending the attach's transaction (%s): %w", end, err)
		}
	}
	if len(claimed) < len(sorted) {
		return nil, errRace
	}
	out := make([]api.IsolatedDevice, len(ids))
	for i, id := range ids {
		out[i] = claimed[id]
	}
	return out, nil
}

// readPickBatch reads the first batch's answers: the BEGIN, the SET, the host's id
// (ErrNotFound when no host has that id or name), and when the summary was
// sent for hint, the pick; none when the host's id is not hint.
func readPickBatch(br pgx.BatchResults, r api.AttachRequest, hint string, hinted bool) (hostID string, ids []string, free int, err error) {
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("attaching isolated devices: %w", cerr)
		}
	}()
	if _, err := br.Exec(); err != nil {
		return "", nil, 0, fmt.Errorf("beginning transaction: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return "", nil, 0, fmt.Errorf("asking for generic plans: %w", err)
	}
	err = br.QueryRow().Scan(&hostID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", nil, 0, refuse(ErrNotFound, "host %q not found", r.Host)
	case err != nil:
		return "", nil, 0, fmt.Errorf("reading host %s: %w", r.Host, err)
	case !hinted || hostID != hint:
		return hostID, nil, 0, nil // the summary, if sent, is of another host: Close skips it
	}
	rows, err := br.Query()
	if err != nil {
		return "", nil, 0, fmt.Errorf("reading the free devices per GPU: %w", err)
	}
	defer rows.Close()
	ids, free, err = pgPickFrom(rows, r.Count)
	return hostID, ids, free, err
}

// hostIDs maps the name (or id) a request gave for a host to the host's
// id, as the host's lock last answered it: a hint, checked by the lock of
// the transaction that uses it (see pgAttach).
type hostIDs struct {
	mu  sync.Mutex
	ids map[string]string
}

// maxHostHints bounds hostIDs: past it, it starts again empty.
const maxHostHints = 1 << 14

func (h *hostIDs) get(host string) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	id, ok := h.ids[host]
	return id, ok
}

func (h *hostIDs) put(host, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ids == nil || len(h.ids) >= maxHostHints {
		h.ids = map[string]string{}
	}
	h.ids[host] = id
}

func (h *hostIDs) forget(host string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.ids, host)
}

// readClaimBatch reads the second batch's answers: the rows' locks (for
// several), each claim's row, the COMMIT (for one). claimed has the rows
// claimed, by id; fewer than asked when a row was taken.
func readClaimBatch(br pgx.BatchResults, sorted []string) (claimed map[string]api.IsolatedDevice, err error) {
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("attaching isolated devices: %w", cerr)
		}
	}()
	if len(sorted) > 1 {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("locking the devices picked: %w", err)
		}
	}
	claimed = make(map[string]api.IsolatedDevice, len(sorted))
	for _, id := range sorted {
		rows, err := br.Query()
		if err != nil {
			return nil, fmt.Errorf("attaching isolated device %s: %w", id, err)
		}
		for rows.Next() {
			d, _, err := scanDeviceSeq(rows, false)
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("attaching isolated device %s: %w", id, err)
			}
			claimed[id] = d
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("attaching isolated device %s: %w", id, err)
		}
	}
	if len(sorted) == 1 {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("committing transaction: %w", err)
		}
	}
	return claimed, nil
}

// lockPickedQuery locks the n rows of a pick of several devices by id, in
// id order, before the first claim (PostgreSQL). A claim's counter trigger
// may lock counter rows (migration 0004; since 0008 only the write that
// folds the deltas, about one in 256, at most one at a time): claiming the
// rows one statement at a time unlocked would hold the counters of the
// first while waiting for the row of the second, which an attach by id or
// an update may hold while it waits for those counters: a deadlock. Locked
// first, device rows always come before counter rows, as in every other
// writer. A pick of one device (its claim locks the row, then the
// counters) and SQLite need nothing.
func lockPickedQuery(n int) string {
	return `SELECT id FROM isolated_devices WHERE id IN (?` + strings.Repeat(`, ?`, n-1) + `) ORDER BY id` + postgresDialect.forUpdate()
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
