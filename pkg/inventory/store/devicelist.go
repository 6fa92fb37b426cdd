package store

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"yunion.io/x/mps-daemon/pkg/api"
)

// DeviceFilter selects isolated devices for ListDevices. Empty strings,
// empty lists, nil and false match everything; a list matches any of its
// values (Cloudpods' dev_type.0=..&dev_type.1=..). Limit 0 returns no rows
// (only the total); negative values are refused.
type DeviceFilter struct {
	// HostID is a host's id or name. An unknown host is ErrNotFound, so a
	// mistyped --host is not mistaken for a host without devices.
	HostID   string
	DevTypes []string
	Models   []string
	Addrs    []string
	// DevicePaths are physical GPUs (their UUID for MPS).
	DevicePaths     []string
	VendorDeviceIDs []string
	// Vendors are vendor names or PCI vendor ids (NVIDIA, 10de).
	Vendors   []string
	NumaNodes []int
	// Names are device names (climc looks a name up with ?name=).
	Names []string
	// GPU keeps the devices whose dev_type starts with GPU (climc's
	// --gpu, as Cloudpods reads it).
	GPU bool
	// Index and DeviceMinor, when set and not negative, keep the devices
	// with that value (Cloudpods ignores negative ones).
	Index, DeviceMinor *int
	GuestID            string
	// Unused keeps the devices no guest holds (Cloudpods' meaning: an
	// unhealthy or pending_removal device with no guest is "unused" too).
	Unused bool
	// Unhealthy and PendingRemoval, when set, keep the devices whose flag
	// has that value.
	Unhealthy, PendingRemoval *bool
	// Details fills the details (see withDetails): the host's name, the
	// vendor and the guest's id.
	Details       bool
	Limit, Offset int
	// Desc lists newest first (Cloudpods' default order) instead of in
	// creation order; ListDevices only (a marker walk takes its own).
	Desc bool
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
	for _, c := range []struct {
		col string
		v   []string
	}{
		{"d.dev_type", f.DevTypes}, {"d.model", f.Models}, {"d.addr", f.Addrs},
		{"d.device_path", f.DevicePaths}, {"d.vendor_device_id", f.VendorDeviceIDs}, {"d.name", f.Names},
	} {
		if cond, vals := inList(c.col, c.v); cond != "" {
			conds, args = append(conds, cond), append(args, vals...)
		}
	}
	if f.GuestID != "" {
		add("d.guest_id = ?", f.GuestID)
	}
	if len(f.NumaNodes) > 0 {
		vals := make([]any, len(f.NumaNodes))
		for i, n := range f.NumaNodes {
			vals[i] = n
		}
		conds = append(conds, "d.numa_node IN ("+placeholders(len(vals))+")")
		args = append(args, vals...)
	}
	if len(f.Vendors) > 0 {
		var ors []string
		for _, v := range f.Vendors {
			// A prefix as a range, so both backends compare bytes.
			ors = append(ors, "(d.vendor_device_id >= ? AND d.vendor_device_id < ?)")
			id := vendorID(v)
			args = append(args, id+":", id+";")
		}
		conds = append(conds, "("+strings.Join(ors, " OR ")+")")
	}
	if f.Index != nil && *f.Index >= 0 {
		add("d.dev_index = ?", *f.Index)
	}
	if f.DeviceMinor != nil && *f.DeviceMinor >= 0 {
		add("d.device_minor = ?", *f.DeviceMinor)
	}
	if f.GPU {
		conds = append(conds, gpuCond("d."))
	}
	if f.Unused {
		conds = append(conds, "d.guest_id = ''")
	}
	conds = append(conds, f.stateConds("d.")...)
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// How a page stays cheap at a million rows (migration 0004):
//
//   - the page is ORDER BY seq LIMIT n read from an index whose equality
//     columns are the filter's and whose next column is seq, so it reads n
//     (+ offset) entries and sorts nothing; a filter on a host, GPU or guest
//     may instead sort that host's, GPU's or guest's rows, a few hundred;
//   - the total comes from the counters of isolated_device_counts when the
//     filter could match most of the table (see countable), else from
//     COUNT(*) on the index of the host, GPU, guest or address that bounds
//     it;
//   - a deep page costs its OFFSET; a marker page (ListDevicesByMarker)
//     starts with a seek instead, so a walk over every row costs the same
//     per page however far it is.

// countable reports whether the counters can answer f's total: f has no
// filter that bounds the rows to one host, GPU, guest or address. Those are
// counted with COUNT(*) on their index, a few hundred entries at most; the
// exception is an address without a host (which climc does not offer):
// no index has addr first, so that count, like its page, scans.
// The filters that only the device rows can answer (vendor, NUMA node,
// index, name, ...) are counted with COUNT(*) too: climc rarely sends them,
// and each is a scan of the rows the other filters leave.
func (f DeviceFilter) countable(hostID string) bool {
	return hostID == "" && len(f.Addrs) == 0 && len(f.DevicePaths) == 0 && f.GuestID == "" &&
		len(f.VendorDeviceIDs) == 0 && len(f.Vendors) == 0 && len(f.NumaNodes) == 0 && len(f.Names) == 0 &&
		(f.Index == nil || *f.Index < 0) && (f.DeviceMinor == nil || *f.DeviceMinor < 0)
}

// countsWhere builds the WHERE of the counters' sum for a countable f.
func (f DeviceFilter) countsWhere() (string, []any) {
	var conds []string
	var args []any
	for _, c := range []struct {
		col string
		v   []string
	}{{"dev_type", f.DevTypes}, {"model", f.Models}} {
		if cond, vals := inList(c.col, c.v); cond != "" {
			conds, args = append(conds, cond), append(args, vals...)
		}
	}
	if f.GPU {
		conds = append(conds, gpuCond(""))
	}
	if f.Unused {
		conds = append(conds, "NOT held")
	}
	conds = append(conds, f.stateConds("")...)
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// countQuery is the statement of f's total.
func (f DeviceFilter) countQuery(hostID string) (string, []any) {
	if f.countable(hostID) {
		where, args := f.countsWhere()
		return `SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) FROM isolated_device_counts` + where, args
	}
	where, args := f.where(hostID)
	return `SELECT COUNT(*) FROM isolated_devices d` + where, args
}

// pageQuery selects one page of rows of isolated_devices (all columns):
// at most limit rows in seq order (the LIMIT is lim's, see limitClause),
// after offset rows, or from the marker seq on (inclusive) when marker >=
// 0. withHosts makes it the statement run.
func (f DeviceFilter) pageQuery(hostID string, lim limit, offset int, marker int64, desc bool) (string, []any) {
	where, args := f.where(hostID)
	order := " ORDER BY d.seq"
	if desc {
		order += " DESC"
	}
	if marker >= 0 {
		cond := "d.seq >= ?"
		if desc {
			cond = "d.seq <= ?"
		}
		if where == "" {
			where = " WHERE " + cond
		} else {
			where += " AND " + cond
		}
		args = append(args, marker)
	}
	inner := `SELECT * FROM isolated_devices d` + where + order + lim.clause
	args = append(args, lim.args...)
	if offset > 0 {
		inner += ` OFFSET ?`
		args = append(args, offset)
	}
	return inner, args
}

// withHosts wraps a page statement (pageQuery) to read pageColumns: the
// page is chosen on isolated_devices alone and joined to its hosts after,
// so no planner can start from hosts and sort every device it reaches.
func withHosts(page string, desc bool) string {
	order := " ORDER BY d.seq"
	if desc {
		order += " DESC"
	}
	return `SELECT ` + pageColumns + ` FROM (` + page + `) d JOIN hosts h ON h.id = d.host_id` + order
}

// ListDevices returns one page of the devices f selects, in creation order
// (newest first with f.Desc), and how many match in all. Count and page
// come from one snapshot.
func (s *Store) ListDevices(ctx context.Context, f DeviceFilter) ([]api.IsolatedDevice, int, error) {
	if err := checkPage(f.Limit, f.Offset); err != nil {
		return nil, 0, err
	}
	var devs []api.IsolatedDevice
	var total int
	err := s.inTx(ctx, true, func(tx *sql.Tx) error {
		hostID, err := s.filterHost(ctx, tx, f)
		if err != nil {
			return err
		}
		q, args := f.countQuery(hostID)
		if err := s.prep(tx).QueryRowContext(ctx, s.d.bind(q), args...).Scan(&total); err != nil {
			return fmt.Errorf("counting isolated devices: %w", err)
		}
		if f.Limit == 0 || f.Offset >= total {
			return nil
		}
		q, args = f.pageQuery(hostID, s.limitClause(f.Limit), f.Offset, -1, f.Desc)
		devs, err = s.queryDevices(ctx, tx, withHosts(q, f.Desc), args, f.Details, f.Limit)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	return devs, total, nil
}

// DevicePage is one page of a marker walk.
type DevicePage struct {
	Devices []api.IsolatedDevice
	// NextMarker starts the next page; "" after the last one.
	NextMarker string
	// HostVersion is, when the filter names a host, the host's devices
	// version as this page's snapshot saw it (versions.go): a client that
	// sends it back later (DevicesVersion) learns whether any row of the
	// host changed since this page was read.
	HostVersion int64
}

// ListDevicesByMarker returns the page of the devices f selects that starts
// at marker ("" for the first page, else a NextMarker this method returned),
// in creation order (newest first when desc), as Cloudpods' paging_marker
// pages: f.Limit rows, and the marker of the row after them. It counts
// nothing, and each page costs the same however far into the list it is.
// A row created during the walk shows up if it sorts after the current page
// (it always does in ascending order); a row deleted does not shift the
// pages. f.Offset must be 0.
func (s *Store) ListDevicesByMarker(ctx context.Context, f DeviceFilter, marker string, desc bool) (DevicePage, error) {
	if err := checkPage(f.Limit, f.Offset); err != nil {
		return DevicePage{}, err
	}
	if f.Offset != 0 {
		return DevicePage{}, refuse(ErrInvalid, "offset: give either offset or paging_marker")
	}
	from, err := parseMarker(marker)
	if err != nil {
		return DevicePage{}, err
	}
	var page DevicePage
	err = s.inTx(ctx, true, func(tx *sql.Tx) error {
		var hostID string
		if f.HostID != "" {
			hv, err := s.hostVersion(ctx, tx, f.HostID)
			if err != nil {
				return err
			}
			hostID, page.HostVersion = hv.HostID, hv.Version
		}
		q, args := f.pageQuery(hostID, s.limitClause(f.Limit+1), 0, from, desc)
		rows, err := s.prep(tx).QueryContext(ctx, s.d.bind(withHosts(q, desc)), args...)
		if err != nil {
			return fmt.Errorf("listing isolated devices: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			d, seq, err := scanDeviceSeq(rows, f.Details)
			if err != nil {
				return fmt.Errorf("reading isolated device row: %w", err)
			}
			if len(page.Devices) == f.Limit {
				page.NextMarker = strconv.FormatInt(seq, 10)
				break
			}
			page.Devices = append(page.Devices, d)
		}
		return rows.Err()
	})
	if err != nil {
		return DevicePage{}, err
	}
	return page, nil
}

// parseMarker reads a paging marker: a device's seq in decimal, or "" for
// the start (-1: no bound).
func parseMarker(marker string) (int64, error) {
	if marker == "" {
		return -1, nil
	}
	seq, err := strconv.ParseInt(marker, 10, 64)
	if err != nil || seq < 0 {
		return 0, refuse(ErrInvalid, "paging_marker: %q is not a marker this server gave (use next_marker of the previous page)", marker)
	}
	return seq, nil
}

// filterHost resolves f's host (id or name) to its id; "" without one.
func (s *Store) filterHost(ctx context.Context, q querier, f DeviceFilter) (string, error) {
	if f.HostID == "" {
		return "", nil
	}
	h, err := s.getHost(ctx, q, f.HostID)
	if err != nil {
		return "", err
	}
	return h.ID, nil
}

// queryDevices runs a page statement and reads at most n of its rows.
func (s *Store) queryDevices(ctx context.Context, tx *sql.Tx, q string, args []any, details bool, n int) ([]api.IsolatedDevice, error) {
	rows, err := s.prep(tx).QueryContext(ctx, s.d.bind(q), args...)
	if err != nil {
		return nil, fmt.Errorf("listing isolated devices: %w", err)
	}
	defer rows.Close()
	var devs []api.IsolatedDevice
	for len(devs) < n && rows.Next() {
		d, _, err := scanDeviceSeq(rows, details)
		if err != nil {
			return nil, fmt.Errorf("reading isolated device row: %w", err)
		}
		devs = append(devs, d)
	}
	return devs, rows.Err()
}

// ExplainListDevices returns the database's plans of the statements
// ListDevices (or, with byMarker, ListDevicesByMarker) runs for f: the
// total's, then the page's, as EXPLAIN QUERY PLAN (SQLite) or EXPLAIN
// (PostgreSQL) print them. It is for checking at scale that they use the
// indexes (see cmd/mps-inventory-bench).
func (s *Store) ExplainListDevices(ctx context.Context, f DeviceFilter, byMarker bool) (string, error) {
	var out strings.Builder
	err := s.inTx(ctx, true, func(tx *sql.Tx) error {
		hostID, err := s.filterHost(ctx, tx, f)
		if err != nil {
			return err
		}
		type stmt struct {
			what, q string
			args    []any
		}
		var stmts []stmt
		if byMarker {
			q, args := f.pageQuery(hostID, s.limitClause(f.Limit+1), 0, 0, false)
			stmts = append(stmts, stmt{"page", withHosts(q, false), args})
		} else {
			q, args := f.countQuery(hostID)
			stmts = append(stmts, stmt{"total", q, args})
			q, args = f.pageQuery(hostID, s.limitClause(f.Limit), f.Offset, -1, f.Desc)
			stmts = append(stmts, stmt{"page", withHosts(q, f.Desc), args})
		}
		for _, st := range stmts {
			plan, err := s.explain(ctx, tx, st.q, st.args)
			if err != nil {
				return fmt.Errorf("explaining the %s: %w", st.what, err)
			}
			fmt.Fprintf(&out, "-- %s: %s\n%s", st.what, st.q, plan)
		}
		return nil
	})
	return out.String(), err
}

// explain returns the plan of q, one line per row of the answer.
func (s *Store) explain(ctx context.Context, tx *sql.Tx, q string, args []any) (string, error) {
	prefix := "EXPLAIN "
	if s.d.name == "sqlite" {
		prefix = "EXPLAIN QUERY PLAN "
	}
	rows, err := tx.QueryContext(ctx, s.d.bind(prefix+q), args...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return "", err
		}
		// The plan text is the last column on both backends.
		fmt.Fprintf(&b, "%s\n", vals[len(vals)-1])
	}
	return b.String(), rows.Err()
}

// stateConds are the conditions of the unhealthy and pending_removal
// filters on columns prefixed with prefix: nil asks nothing, true the state,
// false its absence.
func (f DeviceFilter) stateConds(prefix string) []string {
	var conds []string
	for _, c := range []struct {
		col string
		v   *bool
	}{{prefix + "unhealthy", f.Unhealthy}, {prefix + "pending_removal", f.PendingRemoval}} {
		switch {
		case c.v == nil:
		case *c.v:
			conds = append(conds, c.col)
		default:
			conds = append(conds, "NOT "+c.col)
		}
	}
	return conds
}

// inList is the condition that col is one of vals: "col = ?" for one value
// (an index's equality, which keeps its seq order), "col IN (?, ...)" for
// more, "" for none.
func inList(col string, vals []string) (string, []any) {
	if len(vals) == 0 {
		return "", nil
	}
	args := make([]any, len(vals))
	for i, v := range vals {
		args[i] = v
	}
	if len(vals) == 1 {
		return col + " = ?", args
	}
	return col + " IN (" + placeholders(len(vals)) + ")", args
}

// limit is the LIMIT clause of a statement that reads at most n rows
// (limitClause), with its arguments.
type limit struct {
	clause string
	args   []any
}

// maxLiteralLimit is the largest LIMIT written as a literal on SQLite.
const maxLiteralLimit = 4096

// limitClause is the LIMIT of a statement that reads at most n rows. On
// SQLite it is a literal from a small fixed set, the next power of two at
// or above n, and the caller stops reading after its n rows (rows are
// produced one by one, so the rest are never read): a bound LIMIT ? makes
// SQLite prepare the statement again on every execution (its planner reads
// the bound value, and binding it again expires the statement: 26 us a
// page query against 16 us with a literal, issue 41), and a literal of
// every n would fill the statement cache. Past maxLiteralLimit (loaders)
// it is bound. PostgreSQL binds it: its plans are cached per statement,
// and a generic plan does not depend on the value.
func (s *Store) limitClause(n int) limit {
	if s.d.name != "sqlite" || n > maxLiteralLimit {
		return limit{" LIMIT ?", []any{n}}
	}
	p := 1
	for p < n {
		p *= 2
	}
	return limit{" LIMIT " + strconv.Itoa(p), nil}
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// gpuCond is Cloudpods' --gpu: dev_type starts with GPU, written as a range
// so that it compares bytes on both backends and can read the dev_type
// index. A range cannot hand out rows in seq order: the page sorts the GPU
// rows it matches, which are few where MPS slices are NVIDIA_MPS rows (the
// total comes from the counters all the same).
func gpuCond(prefix string) string {
	return "(" + prefix + "dev_type >= 'GPU' AND " + prefix + "dev_type < 'GPV')"
}
