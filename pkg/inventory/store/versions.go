package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// A host's devices version (migration 0011): a number the database gives
// the host whenever one of its isolated_devices rows is inserted, updated
// or deleted, by any writer, in the writing transaction. Versions come
// from one counter (SQLite) or sequence (PostgreSQL) for the whole
// database, so a number is never handed out twice: equal versions mean
// the host's rows did not change between the two reads, and a version of
// another host never equals this host's. 0 is no version (a host without
// a row of isolated_device_versions, which only a hand-made host can be):
// it equals nothing.

// hostVersionQuery reads a host named by its id or, failing that, its
// name, with its devices version: one statement, two index seeks and the
// version's. Its arguments: the id or name, three times.
//
// PostgreSQL answers the OR from both indexes (a BitmapOr) and sorts the
// two rows at most; SQLite did the same with a temporary B-tree, so there
// it is two seeks, the id's first (UNION ALL in order, LIMIT 1: the name's
// is read only when no id matched, as pickHostQuery).
func (s *Store) hostVersionQuery() string {
	const cols = `SELECT h.id, COALESCE(v.version, 0) FROM hosts h LEFT JOIN isolated_device_versions v ON v.host_id = h.id`
	if s.d.name == "sqlite" {
		return cols + ` WHERE h.id = ? UNION ALL ` + cols + ` WHERE h.name = ? AND h.id <> ? LIMIT 1`
	}
	return cols + ` WHERE h.id = ? OR h.name = ? ORDER BY CASE WHEN h.id = ? THEN 0 ELSE 1 END LIMIT 1`
}

// HostVersion is a host's id and the version of its devices.
type HostVersion struct {
	HostID string
	// Version is 0 when the host has none.
	Version int64
}

// DevicesVersion reads the version of the devices of the host idOrName
// names (an id, or failing that a name; ErrNotFound for neither): one
// statement outside any transaction, which is what an unchanged host sync
// costs the database (GET /isolated_devices with devices_version).
func (s *Store) DevicesVersion(ctx context.Context, idOrName string) (HostVersion, error) {
	ctx, cancel := context.WithTimeout(ctx, txTimeout)
	defer cancel()
	// A daemon names its host by its id: two primary-key seeks, a plan
	// with nothing to choose; a name (or a host without a version) is
	// looked up as a path's host is.
	var hv HostVersion
	err := s.prep(s.db).QueryRowContext(ctx, s.d.bind(hostVersionByIDQuery), idOrName).Scan(&hv.HostID, &hv.Version)
	switch {
	case err == nil:
		return hv, nil
	case !errors.Is(err, sql.ErrNoRows):
		return HostVersion{}, fmt.Errorf("reading the devices version of host %s: %w", idOrName, err)
	}
	return s.hostVersion(ctx, s.db, idOrName)
}

// hostVersionByIDQuery reads the version of the host whose id is its
// argument, and that host's id (the host must exist: a version row alone,
// of a host deleted by hand, is none).
const hostVersionByIDQuery = `SELECT h.id, v.version FROM isolated_device_versions v JOIN hosts h ON h.id = v.host_id WHERE v.host_id = ?`

func (s *Store) hostVersion(ctx context.Context, q querier, idOrName string) (HostVersion, error) {
	var hv HostVersion
	err := s.prep(q).QueryRowContext(ctx, s.d.bind(s.hostVersionQuery()), idOrName, idOrName, idOrName).Scan(&hv.HostID, &hv.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return HostVersion{}, refuse(ErrNotFound, "host %q not found", idOrName)
	}
	if err != nil {
		return HostVersion{}, fmt.Errorf("reading the devices version of host %s: %w", idOrName, err)
	}
	return hv, nil
}
