package regioncompat

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// What the comparison normalises, and nothing else:
//
//   - ids: each device's id becomes dev:<its name> and the host's id host
//     (the two sides assign their own UUIDs to the same rows);
//   - timestamps (created_at, updated_at, imported_at) become T;
//   - how a held device names its guest (declaredGuestFields): Cloudpods'
//     master answers a list of guests (one device may be shared there) and
//     their statuses in details, and no guest_id; this inventory keeps one
//     row per slice, as Cloudpods 4.0.3 does, and answers guest_id and
//     guest (the guest's id: it keeps no guests, so no status either). The
//     comparison checks that both name the same guest, then compares the
//     rest;
//   - in a show, the fields only a full region has (regionOnlyFields): its
//     zone, cloud region, provider, the host's state, and counters of its
//     scheduler. Any other field missing on either side fails.

// regionOnlyFields are the fields of a device show that only a full region
// answers.
var regionOnlyFields = []string{
	"account_read_only", "allocated_count", "brand", "can_delete", "can_update", "cloud_env",
	"cloudregion", "cloudregion_id", "host_access_ip", "host_access_mac", "host_billing_type",
	"host_enabled", "host_resource_type", "host_service_status", "host_status", "host_type",
	"memory_allocated", "provider", "region", "region_id", "zone", "zone_id",
}

var timestamp = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)

// labels maps a side's ids to the labels both sides share.
type labels map[string]string

func (l labels) norm(s string) string {
	for id, label := range l {
		s = strings.ReplaceAll(s, id, label)
	}
	return timestamp.ReplaceAllString(s, "T")
}

// table is a climc table: header, rows of cells, and the footer line.
type table struct {
	header []string
	rows   [][]string
	footer string
}

// parseTable reads what climc prints for a list or a show.
func parseTable(t *testing.T, out string) table {
	t.Helper()
	var tb table
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "|"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			if tb.header == nil {
				tb.header = cells
			} else {
				tb.rows = append(tb.rows, cells)
			}
		case strings.HasPrefix(line, "***"):
			tb.footer = line
		}
	}
	return tb
}

// normTable applies l to every cell, then the declared guest difference.
func normTable(tb table, l labels, region bool) table {
	out := table{header: slices.Clone(tb.header), footer: tb.footer}
	for _, r := range tb.rows {
		row := make([]string, len(r))
		for i, c := range r {
			row[i] = l.norm(c)
		}
		out.rows = append(out.rows, row)
	}
	col := func(name string) int { return slices.Index(out.header, name) }
	drop := func(i int) {
		if i < 0 {
			return
		}
		out.header = slices.Delete(out.header, i, i+1)
		for j := range out.rows {
			out.rows[j] = slices.Delete(out.rows[j], i, i+1)
		}
	}
	if region {
		if g := col("Guest"); g >= 0 {
			for _, r := range out.rows {
				r[g] = unlist(r[g])
			}
		}
		drop(col("Guest_status"))
	} else {
		drop(col("Guest_id"))
	}
	return out
}

// unlist reads `["a"]`, Cloudpods master's list of one guest, as `a`.
func unlist(cell string) string {
	var l []string
	if json.Unmarshal([]byte(cell), &l) == nil && len(l) == 1 {
		return l[0]
	}
	return cell
}

// kv reads a Field/Value table (a show) into a map.
func kv(tb table) map[string]string {
	m := map[string]string{}
	for _, r := range tb.rows {
		if len(r) == 2 {
			m[r[0]] = r[1]
		}
	}
	return m
}

// compareShow compares two shows of one device: the same fields with the
// same values, but for the declared differences.
func compareShow(t *testing.T, what string, region, inv map[string]string, rl, il labels) {
	t.Helper()
	r, i := map[string]string{}, map[string]string{}
	for k, v := range region {
		r[k] = rl.norm(v)
	}
	for k, v := range inv {
		i[k] = il.norm(v)
	}
	declaredGuestFields(t, what, r, i)
	for k := range r {
		if _, ok := i[k]; !ok {
			if slices.Contains(regionOnlyFields, k) {
				delete(r, k)
				continue
			}
			t.Errorf("%s: field %s = %q in the region, missing from the inventory", what, k, r[k])
		}
	}
	for k := range i {
		if _, ok := r[k]; !ok {
			t.Errorf("%s: field %s = %q in the inventory, not in the region", what, k, i[k])
		}
	}
	for k, v := range r {
		if iv, ok := i[k]; ok && iv != v {
			t.Errorf("%s: %s = %q in the region, %q in the inventory", what, k, v, iv)
		}
	}
}

// declaredGuestFields applies the guest difference to a show's fields.
func declaredGuestFields(t *testing.T, what string, region, inv map[string]string) {
	t.Helper()
	if g, ok := region["guest"]; ok {
		region["guest"] = unlist(g)
	}
	delete(region, "guest_status")
	if id, ok := inv["guest_id"]; ok {
		if inv["guest"] != id {
			t.Errorf("%s: the inventory's guest %q is not its guest_id %q", what, inv["guest"], id)
		}
		delete(inv, "guest_id")
	}
}

// normJSON normalises a decoded JSON value: strings through l, the guest
// difference in every object.
func normJSON(v any, l labels, region bool) any {
	switch x := v.(type) {
	case string:
		return l.norm(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normJSON(e, l, region)
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = normJSON(e, l, region)
		}
		if region {
			if g, ok := out["guest"].([]any); ok && len(g) == 1 {
				out["guest"] = g[0]
			}
			delete(out, "guest_status")
			for _, k := range regionOnlyFields {
				delete(out, k)
			}
		} else {
			delete(out, "guest_id")
		}
		return out
	}
	return v
}

// sameJSON compares two JSON outputs of climc after normalising them.
func sameJSON(t *testing.T, what, region, inv string, rl, il labels) {
	t.Helper()
	var r, i any
	if err := json.Unmarshal([]byte(region), &r); err != nil {
		t.Fatalf("%s: the region's output is not JSON: %v\n%s", what, err, region)
	}
	if err := json.Unmarshal([]byte(inv), &i); err != nil {
		t.Fatalf("%s: the inventory's output is not JSON: %v\n%s", what, err, inv)
	}
	r, i = normJSON(r, rl, true), normJSON(i, il, false)
	if !reflect.DeepEqual(r, i) {
		rb, _ := json.MarshalIndent(r, "", " ")
		ib, _ := json.MarshalIndent(i, "", " ")
		t.Errorf("%s differs\nregion:    %s\ninventory: %s", what, rb, ib)
	}
}

// climcError is the error climc prints (on stderr) for an error answer.
type climcError struct {
	Class   string `json:"class"`
	Code    int    `json:"code"`
	Details string `json:"details"`
}

// parseClimcError finds the error answer in what climc printed: on stderr
// as {"error": {...}} for one request, or in the table a batch command
// (isolated-device-purge) prints, one {"class": ...} per failed id.
func parseClimcError(t *testing.T, what, out string) climcError {
	t.Helper()
	if i := strings.Index(out, `{"error":`); i >= 0 {
		var e struct{ Error climcError }
		if json.NewDecoder(strings.NewReader(out[i:])).Decode(&e) == nil {
			return e.Error
		}
	}
	if i := strings.Index(out, `{"class":`); i >= 0 {
		var e climcError
		if json.NewDecoder(strings.NewReader(out[i:])).Decode(&e) == nil {
			return e
		}
	}
	t.Fatalf("%s: no error answer in what climc printed: %q", what, out)
	return climcError{}
}

func (tb table) String() string {
	var b strings.Builder
	fmt.Fprintln(&b, strings.Join(tb.header, " | "))
	for _, r := range tb.rows {
		fmt.Fprintln(&b, strings.Join(r, " | "))
	}
	b.WriteString(tb.footer)
	return b.String()
}
