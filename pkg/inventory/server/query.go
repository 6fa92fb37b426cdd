package server

import (
	"net/url"
	"strconv"
	"strings"

	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

const (
	// defaultLimit is climc's page size.
	defaultLimit = 20
	// maxLimit caps a page; a larger limit is lowered to it and the answer's
	// "limit" says so.
	maxLimit = 2048
)

// parsePage reads limit and offset. limit=0 is an ordinary value (a page of
// no rows, with the total).
func parsePage(q url.Values) (limit, offset int, err error) {
	limit, err = nonNegative(q, "limit", defaultLimit)
	if err != nil {
		return 0, 0, err
	}
	offset, err = nonNegative(q, "offset", 0)
	if err != nil {
		return 0, 0, err
	}
	return min(limit, maxLimit), offset, nil
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

// deviceFilter reads the list parameters climc sends. Parameters this API
// does not know (Cloudpods clients send some, like scope) are ignored.
func deviceFilter(q url.Values) (store.DeviceFilter, error) {
	f := store.DeviceFilter{
		HostID:     q.Get("host_id"),
		DevType:    q.Get("dev_type"),
		Model:      q.Get("model"),
		Addr:       q.Get("addr"),
		DevicePath: q.Get("gpu"),
		GuestID:    q.Get("guest_id"),
	}
	if f.HostID == "" {
		f.HostID = q.Get("host")
	}
	var err error
	if f.Unused, err = parseBool(q, "unused"); err != nil {
		return f, err
	}
	if f.Details, err = parseBool(q, "details"); err != nil {
		return f, err
	}
	if f.Unhealthy, err = parseOptionalBool(q, "unhealthy"); err != nil {
		return f, err
	}
	if f.PendingRemoval, err = parseOptionalBool(q, "pending_removal"); err != nil {
		return f, err
	}
	f.Limit, f.Offset, err = parsePage(q)
	return f, err
}

func hostFilter(q url.Values) (store.HostFilter, error) {
	f := store.HostFilter{Name: q.Get("name")}
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
