package server

import (
	"cmp"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// List parameters, read as Cloudpods reads them:
//
//   - limit absent or 0 is the server's page maximum, 2048; a larger limit
//     stays what the client asked for in the answer unless more than 2048
//     rows match, when it becomes 2048 (the rows are 2048 at most either
//     way); offset skips rows;
//   - a list filter takes one value (dev_type=GPU) or several, numbered as
//     climc sends them (dev_type.0=GPU&dev_type.1=NPU), or repeated;
//   - booleans are true/false (1/0, t/f: strconv.ParseBool);
//   - parameters the inventory does not know (scope, summary_stats,
//     provider, ...) are ignored and named in a debug line: scope because
//     every caller sees every device here (rights are the token's role).

const (
	// maxLimit is Cloudpods' page maximum, and its default page.
	maxLimit = 2048
	// maxListValues bounds the values of one list filter.
	maxListValues = 100
)

// parsePage reads limit and offset for the query: limit 0, or one above
// maxLimit, reads maxLimit rows.
func parsePage(q url.Values) (limit, offset int, err error) {
	limit, err = askedLimit(q)
	if err != nil {
		return 0, 0, err
	}
	offset, err = nonNegative(q, "offset", 0)
	if err != nil {
		return 0, 0, err
	}
	return min(limit, maxLimit), offset, nil
}

// askedLimit is the limit the client asked for; 0 or none is maxLimit.
func askedLimit(q url.Values) (int, error) {
	limit, err := nonNegative(q, "limit", 0)
	if limit == 0 {
		limit = maxLimit
	}
	return limit, err
}

// answerLimit is the limit an answer to q reports for a page of total
// rows: the one asked for, or maxLimit once more rows than that match.
func answerLimit(q url.Values, total int) int {
	asked, _ := askedLimit(q) // parsePage refused a bad one
	if total > maxLimit && asked > maxLimit {
		return maxLimit
	}
	return asked
}

func nonNegative(q url.Values, name string, def int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, badInput("query parameter %s: %q is not a non-negative integer", name, v)
	}
	return n, nil
}

func parseBool(q url.Values, name string) (bool, error) {
	v := q.Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badInput("query parameter %s: %q is not true or false", name, v)
	}
	return b, nil
}

// parseOptionalBool is parseBool for a filter that is off when absent.
func parseOptionalBool(q url.Values, name string) (*bool, error) {
	if q.Get(name) == "" {
		return nil, nil
	}
	b, err := parseBool(q, name)
	return &b, err
}

// parseOptionalInt reads an integer filter that is off when absent.
func parseOptionalInt(q url.Values, name string) (*int, error) {
	v := q.Get(name)
	if v == "" {
		return nil, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return nil, badInput("query parameter %s: %q is not an integer", name, v)
	}
	return &n, nil
}

// listIndex matches a numbered list parameter: name.N.
var listIndex = regexp.MustCompile(`^([a-z_]+)\.(\d+)$`)

// params is a request's query with its keys grouped by parameter name, in
// one pass over the keys: name=v (repeatable) and name.0=v, name.1=w...
// are all name's. The filters read their values from it (list), and the
// debug line of ignored parameters their names (unknown).
type params struct {
	url.Values
	byName map[string]*param
}

// param is what the query holds for one parameter name.
type param struct {
	// keys are the query keys of the name: the name itself and its
	// numbered forms.
	keys []string
	// values are name=v's values, then name.N's in N's order; empty values
	// are dropped.
	values []string
	// err refuses a numbered key whose number does not parse.
	err error
}

// parseParams groups q's keys by name (see params).
func parseParams(q url.Values) params {
	type numbered struct {
		n int
		v []string
	}
	p := params{Values: q, byName: map[string]*param{}}
	nums := map[string][]numbered{}
	for key, v := range q {
		name := key
		m := listIndex.FindStringSubmatch(key)
		if m != nil {
			name = m[1]
		}
		pp := p.byName[name]
		if pp == nil {
			pp = &param{}
			p.byName[name] = pp
		}
		pp.keys = append(pp.keys, key)
		if m == nil {
			continue
		}
		n, err := strconv.Atoi(m[2])
		if err != nil {
			pp.err = badInput("query parameter %s: not a list index", key)
			continue
		}
		nums[name] = append(nums[name], numbered{n, v})
	}
	for name, pp := range p.byName {
		vals := slices.Clone(q[name])
		slices.SortFunc(nums[name], func(a, b numbered) int { return a.n - b.n })
		for _, x := range nums[name] {
			vals = append(vals, x.v...)
		}
		pp.values = slices.DeleteFunc(vals, func(v string) bool { return v == "" })
	}
	return p
}

// list reads the values of list filter name: name=v (repeatable) and
// name.0=v, name.1=w... in their number's order. Empty values are dropped.
func (p params) list(name string) ([]string, error) {
	pp := p.byName[name]
	switch {
	case pp == nil:
		return nil, nil
	case pp.err != nil:
		return nil, pp.err
	case len(pp.values) > maxListValues:
		return nil, badInput("query parameter %s: %d values, at most %d", name, len(pp.values), maxListValues)
	}
	return pp.values, nil
}

// unknown lists the keys of parameters that are none of known (with their
// numbered forms), for the debug line of an ignored parameter.
func (p params) unknown(known []string) []string {
	var out []string
	for name, pp := range p.byName {
		if !slices.Contains(known, name) {
			out = append(out, pp.keys...)
		}
	}
	slices.Sort(out)
	return out
}

// deviceQueryParams are the list parameters deviceFilter reads (with their
// numbered forms); the others are ignored.
var deviceQueryParams = []string{
	"host", "host_id", "dev_type", "model", "addr", "device_path", "vendor_device_id", "vendor",
	"numa_node", "name", "gpu", "server", "guest_id", "unused", "unhealthy", "pending_removal",
	"index", "device_minor", "details", "limit", "offset", "order", "order_by",
	"paging_marker", "paging_order", api.ParamDevicesVersion,
}

// deviceFilter reads the list parameters climc and Cloudpods' host agent
// send. gpu is Cloudpods' boolean (dev_type starts with GPU); a value that
// is not a boolean is a GPU's device_path, as older versions of this
// project's client sent it. server and guest_id both name a guest
// (Cloudpods' master region ignores server: see docs/inventory.md).
func deviceFilter(q params) (store.DeviceFilter, error) {
	f := store.DeviceFilter{HostID: cmp.Or(q.Get("host_id"), q.Get("host")), GuestID: cmp.Or(q.Get("guest_id"), q.Get("server"))}
	lists := []struct {
		name string
		dst  *[]string
	}{
		{"dev_type", &f.DevTypes}, {"model", &f.Models}, {"addr", &f.Addrs}, {"device_path", &f.DevicePaths},
		{"vendor_device_id", &f.VendorDeviceIDs}, {"vendor", &f.Vendors}, {"name", &f.Names},
	}
	for _, l := range lists {
		vals, err := q.list(l.name)
		if err != nil {
			return f, err
		}
		*l.dst = vals
	}
	nodes, err := q.list("numa_node")
	if err != nil {
		return f, err
	}
	for _, v := range nodes {
		n, err := strconv.Atoi(v)
		if err != nil {
			return f, badInput("query parameter numa_node: %q is not an integer", v)
		}
		f.NumaNodes = append(f.NumaNodes, n)
	}
	if g := q.Get("gpu"); g != "" {
		if b, err := strconv.ParseBool(g); err == nil {
			f.GPU = b
		} else {
			f.DevicePaths = append(f.DevicePaths, g)
		}
	}
	if f.Unused, err = parseBool(q.Values, "unused"); err != nil {
		return f, err
	}
	// Absent, details is on: Cloudpods' region answers a list without the
	// parameter with each row's host and vendor (tests/regioncompat's
	// replay of the recorded region).
	f.Details = true
	if q.Get("details") != "" {
		if f.Details, err = parseBool(q.Values, "details"); err != nil {
			return f, err
		}
	}
	if f.Unhealthy, err = parseOptionalBool(q.Values, "unhealthy"); err != nil {
		return f, err
	}
	if f.PendingRemoval, err = parseOptionalBool(q.Values, "pending_removal"); err != nil {
		return f, err
	}
	if f.Index, err = parseOptionalInt(q.Values, "index"); err != nil {
		return f, err
	}
	if f.DeviceMinor, err = parseOptionalInt(q.Values, "device_minor"); err != nil {
		return f, err
	}
	if f.Desc, err = listOrder(q); err != nil {
		return f, err
	}
	f.Limit, f.Offset, err = parsePage(q.Values)
	return f, err
}

// listOrder reads order and order_by. Lists are in creation order, newest
// first as Cloudpods orders them (created_at, then name and id, DESC), or
// oldest first with order=asc; created_at (and id, its tie-break) is the
// one order_by this inventory has, since every other order would sort the
// whole table.
func listOrder(q params) (desc bool, err error) {
	switch o := strings.ToLower(q.Get("order")); o {
	case "", "desc":
		desc = true
	case "asc":
	default:
		return false, badInput("query parameter order: %q is not asc or desc", o)
	}
	by, err := q.list("order_by")
	if err != nil {
		return false, err
	}
	for _, b := range by {
		if b != "created_at" && b != "id" {
			return false, badInput("query parameter order_by: %q: this inventory lists in creation order only (order_by created_at)", b)
		}
	}
	return desc, nil
}

// hostQueryParams are the host list parameters hostFilter reads.
var hostQueryParams = []string{"name", "any_mac", "details", "limit", "offset"}

func hostFilter(q url.Values) (store.HostFilter, error) {
	f := store.HostFilter{Name: q.Get("name"), AnyMAC: q.Get("any_mac")}
	var err error
	f.Limit, f.Offset, err = parsePage(q)
	return f, err
}

// markerPaging reads Cloudpods' marker paging parameters: paging_marker
// (present, even empty, asks for marker paging; empty is the first page)
// and paging_order (asc, the default, or desc).
func markerPaging(q url.Values) (marker string, byMarker, desc bool, err error) {
	if !q.Has("paging_marker") {
		if q.Has("paging_order") {
			return "", false, false, badInput("query parameter paging_order: only with paging_marker")
		}
		return "", false, false, nil
	}
	switch o := strings.ToLower(q.Get("paging_order")); o {
	case "", "asc":
	case "desc":
		desc = true
	default:
		return "", false, false, badInput("query parameter paging_order: %q is not asc or desc", o)
	}
	return q.Get("paging_marker"), true, desc, nil
}
