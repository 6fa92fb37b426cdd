package mpsctl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Object is one resource as the API encodes it: field name to raw JSON value.
// Tables are built from the JSON form rather than from the Go structs so that
// cells show exactly what the API gives (pcie_info as compact JSON, numbers as
// JSON numbers), as Cloudpods' climc does.
type Object map[string]json.RawMessage

// Column is one column of a list table: the header mpsctl prints and the JSON
// field it reads.
type Column struct {
	Header string
	Field  string
	// Always marks the columns the API fills on every row; they are the ones
	// printed when a list is empty and no row can say which columns to show.
	Always bool
}

// Page is the paging of a list answer, printed in the footer. A marker
// page (MarkerField set) has no total: Total is its row count.
type Page struct {
	Total  int
	Limit  int
	Offset int

	MarkerField, MarkerOrder, NextMarker string
}

// ToObjects encodes a slice of API structs into Objects.
func ToObjects[T any](items []T) ([]Object, error) {
	out := make([]Object, 0, len(items))
	for i, it := range items {
		o, err := ToObject(it)
		if err != nil {
			return nil, fmt.Errorf("encoding row %d: %w", i, err)
		}
		out = append(out, o)
	}
	return out, nil
}

// ToObject encodes one API struct into an Object.
func ToObject(v any) (Object, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding %T: %w", v, err)
	}
	var o Object
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, fmt.Errorf("decoding %T as an object: %w", v, err)
	}
	return o, nil
}

// Cell renders a raw JSON value as Cloudpods' climc prints it. ok is false for values
// that do not fill a cell: absent, null and the empty string. Numbers and
// booleans always fill (numa_node -1 is information, not a blank); objects
// and arrays print as compact JSON.
func Cell(raw json.RawMessage) (text string, ok bool) {
	raw = bytes.TrimSpace(raw)
	// false is unfilled too: a state column (Unhealthy, Pending_removal)
	// appears only when some row is in that state.
	if len(raw) == 0 || string(raw) == "null" || string(raw) == "false" {
		return "", false
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return string(raw), true
		}
		return s, s != ""
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return string(raw), true
	}
	return buf.String(), true
}

// ListTable renders a list the way Cloudpods' climc does: a bordered table
// of the columns at least one row fills, in the order of cols, then the
// paging footer.
//
// An empty list prints the header of the columns marked Always and the
// footer, so a user sees what they would have got and that the total is 0,
// instead of a bare footer.
func ListTable(cols []Column, rows []Object, p Page) string {
	return Table(cols, rows) + Footer(p) + "\n"
}

// Table is ListTable without the paging footer, for commands that print the
// rows they changed rather than a page of a list.
func Table(cols []Column, rows []Object) string {
	shown := visibleColumns(cols, rows)
	headers := make([]string, len(shown))
	for i, c := range shown {
		headers[i] = c.Header
	}
	cells := make([][]string, len(rows))
	for r, o := range rows {
		cells[r] = make([]string, len(shown))
		for i, c := range shown {
			cells[r][i], _ = Cell(o[c.Field])
		}
	}
	return FormatTable(headers, cells)
}

// visibleColumns keeps the columns that some row fills; with no rows, the
// columns marked Always.
func visibleColumns(cols []Column, rows []Object) []Column {
	var shown []Column
	for _, c := range cols {
		if len(rows) == 0 {
			if c.Always {
				shown = append(shown, c)
			}
			continue
		}
		if slices.ContainsFunc(rows, func(o Object) bool {
			_, ok := Cell(o[c.Field])
			return ok
		}) {
			shown = append(shown, c)
		}
	}
	return shown
}

// ShowTable renders one object as Cloudpods' climc's two-column `| Field | Value |`
// table: every field that fills a cell, sorted by field name.
func ShowTable(o Object) string {
	keys := make([]string, 0, len(o))
	for k := range o {
		if _, ok := Cell(o[k]); ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	rows := make([][]string, len(keys))
	for i, k := range keys {
		v, _ := Cell(o[k])
		rows[i] = []string{k, v}
	}
	return FormatTable([]string{"Field", "Value"}, rows)
}

// Footer is the paging line under a list. Pages is ceil(Total/Limit) and Page
// is Offset/Limit+1, as Cloudpods computes them (so an empty list reads
// "Pages: 0 ... Page: 1"); a list without a limit is one page.
//
// A marker page prints what Cloudpods' climc prints for one: its rows, the
// order, and the marker of the next page (none after the last).
func Footer(p Page) string {
	if p.MarkerField != "" {
		s := fmt.Sprintf("*** Total: %d Field: %s Order: %s", p.Total, p.MarkerField, p.MarkerOrder)
		if p.NextMarker != "" {
			s += " NextMarker: " + p.NextMarker
		}
		return s + " ***"
	}
	pages, page := 1, 1
	if p.Limit > 0 {
		pages = (p.Total + p.Limit - 1) / p.Limit
		page = p.Offset/p.Limit + 1
	}
	return fmt.Sprintf("*** Total: %d Pages: %d Limit: %d Offset: %d Page: %d ***",
		p.Total, pages, p.Limit, p.Offset, page)
}

// FormatTable draws a prettytable-style box: border, header, border, rows,
// border (the last border only when there are rows). Cells are
// left-aligned with one space of padding each side; a column is as wide as
// its widest cell or header, counted in runes. Every row must have
// len(headers) cells.
func FormatTable(headers []string, rows [][]string) string {
	widths := make([]int, len(headers))
	for i, h := range headers {
		widths[i] = utf8.RuneCountInString(h)
	}
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}

	var b strings.Builder
	border := func() {
		b.WriteByte('+')
		for _, w := range widths {
			b.WriteString(strings.Repeat("-", w+2))
			b.WriteByte('+')
		}
		b.WriteByte('\n')
	}
	line := func(cells []string) {
		b.WriteByte('|')
		for i, c := range cells {
			b.WriteByte(' ')
			b.WriteString(c)
			b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)+1))
			b.WriteByte('|')
		}
		b.WriteByte('\n')
	}

	border()
	line(headers)
	border()
	if len(rows) == 0 {
		// prettytable draws no second closing border under an empty body.
		return b.String()
	}
	for _, r := range rows {
		line(r)
	}
	border()
	return b.String()
}
