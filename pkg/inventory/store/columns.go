package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
)

// The columns of isolated_devices that hold the device record are read from
// api.IsolatedDevice itself: one per field, named as its JSON field or its
// db tag, none for db:"-". Every statement that reads or writes a whole
// device spells its columns from here, in this order, and Open adds the
// column of a field the database lacks (addRecordColumns): a field added
// to the record needs no change here and no migration file. A numbered
// migration that rebuilds isolated_devices (SQLite's way to change a
// column) must keep every column the table has, added ones included.

// recordColumn is the column of one field of api.IsolatedDevice.
type recordColumn struct {
	name  string
	field int
	typ   reflect.Type
}

var timeType = reflect.TypeFor[time.Time]()

// recordColumns are computed once from the record's declaration, never
// changed.
var recordColumns = columnsOf(reflect.TypeFor[api.IsolatedDevice]())

func columnsOf(t reflect.Type) []recordColumn {
	var out []recordColumn
	for i := range t.NumField() {
		f := t.Field(i)
		name := f.Tag.Get("db")
		if name == "-" {
			continue
		}
		if name == "" {
			name, _, _ = strings.Cut(f.Tag.Get("json"), ",")
		}
		out = append(out, recordColumn{name: name, field: i, typ: f.Type})
	}
	return out
}

// storeKept are the record's columns the store alone writes: update_version
// counts updates (0 on insert, the column's default), and a device's
// identity never changes after its insert.
var (
	notInserted = []string{"update_version"}
	notUpdated  = []string{"id", "host_id", "created_at"}
)

// columnList is the record's columns less skip, each with prefix.
func columnList(prefix string, skip ...string) string {
	var names []string
	for _, c := range recordColumns {
		if !slices.Contains(skip, c.name) {
			names = append(names, prefix+c.name)
		}
	}
	return strings.Join(names, ", ")
}

// The column lists of the statements (the order of scanDevice and of
// deviceArgs).
var (
	// deviceColumns read a device with its host's name (for details).
	deviceColumns = columnList("d.") + ", h.name"
	// pageColumns are deviceColumns and the seq a marker page needs.
	pageColumns = deviceColumns + ", d.seq"
	// returningColumns are pageColumns for an UPDATE's RETURNING (no host
	// name: no details).
	returningColumns = columnList("") + ", '', seq"
	// deviceInsertColumns are the columns an insert writes.
	deviceInsertColumns = columnList("", notInserted...)
	deviceInsertCount   = strings.Count(deviceInsertColumns, ",") + 1
	// deviceInsertPlaceholders is one row of `?` for deviceInsertColumns.
	deviceInsertPlaceholders = "(" + strings.TrimSuffix(strings.Repeat("?, ", deviceInsertCount), ", ") + ")"
	// deviceUpdateSet is the SET list of an update of the whole device,
	// "name = ?, ...".
	deviceUpdateSet = strings.ReplaceAll(columnList("", notUpdated...), ",", " = ?,") + " = ?"
)

// deviceArgs are d's values for its columns less skip: timestamps as text,
// a pointer (pcie_info) as JSON or NULL, the rest as they are.
func deviceArgs(d api.IsolatedDevice, skip ...string) ([]any, error) {
	v := reflect.ValueOf(d)
	args := make([]any, 0, len(recordColumns))
	for _, c := range recordColumns {
		if slices.Contains(skip, c.name) {
			continue
		}
		f := v.Field(c.field)
		switch {
		case c.typ == timeType:
			args = append(args, formatTime(f.Interface().(time.Time)))
		case c.typ.Kind() == reflect.Pointer:
			var js sql.NullString
			if !f.IsNil() {
				b, err := json.Marshal(f.Interface())
				if err != nil {
					return nil, fmt.Errorf("encoding %s: %w", c.name, err)
				}
				js = sql.NullString{String: string(b), Valid: true}
			}
			args = append(args, js)
		default:
			args = append(args, f.Interface())
		}
	}
	return args, nil
}

// scanDeviceSeq scans deviceColumns followed by d.seq (pageColumns).
func scanDeviceSeq(r rowScanner, details bool) (api.IsolatedDevice, int64, error) {
	var seq int64
	d, err := scanDevice(r, details, &seq)
	return d, seq, err
}

// scanDevice scans deviceColumns, then extra.
func scanDevice(r rowScanner, details bool, extra ...any) (api.IsolatedDevice, error) {
	var d api.IsolatedDevice
	var hostName string
	v := reflect.ValueOf(&d).Elem()
	dest := make([]any, 0, len(recordColumns)+1+len(extra))
	var times []*dbTime
	var jsons []*sql.NullString
	for _, c := range recordColumns {
		switch {
		case c.typ == timeType:
			times = append(times, new(dbTime))
			dest = append(dest, times[len(times)-1])
		case c.typ.Kind() == reflect.Pointer:
			jsons = append(jsons, new(sql.NullString))
			dest = append(dest, jsons[len(jsons)-1])
		default:
			dest = append(dest, v.Field(c.field).Addr().Interface())
		}
	}
	if err := r.Scan(append(append(dest, &hostName), extra...)...); err != nil {
		return api.IsolatedDevice{}, err
	}
	for _, c := range recordColumns {
		f := v.Field(c.field)
		switch {
		case c.typ == timeType:
			f.Set(reflect.ValueOf(times[0].t))
			times = times[1:]
		case c.typ.Kind() == reflect.Pointer:
			if js := jsons[0]; js.Valid {
				f.Set(reflect.New(c.typ.Elem()))
				if err := json.Unmarshal([]byte(js.String), f.Interface()); err != nil {
					return api.IsolatedDevice{}, fmt.Errorf("decoding %s of %s: %w", c.name, d.ID, err)
				}
			}
			jsons = jsons[1:]
		}
	}
	if details {
		d = withDetails(d, hostName)
	}
	return d, nil
}

// addRecordColumns adds the column of each record field the database
// lacks (a field added to api.IsolatedDevice since the database was
// made), NOT NULL with its zero value as default (a pointer's column is
// nullable JSON): existing rows read as before the field existed. It runs
// after the numbered migrations, under their lock, so processes opening one
// database at once add a column once. Older binaries ignore the column.
func (s *Store) addRecordColumns(ctx context.Context) error {
	return s.inTxWithin(ctx, migrationTimeout, false, func(tx *sql.Tx) error {
		if err := s.d.migrationLock(ctx, tx); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT * FROM isolated_devices WHERE 1 = 0`)
		if err != nil {
			return fmt.Errorf("reading the columns of isolated_devices: %w", err)
		}
		have, err := rows.Columns()
		rows.Close()
		if err != nil {
			return fmt.Errorf("reading the columns of isolated_devices: %w", err)
		}
		for _, c := range recordColumns {
			if slices.Contains(have, c.name) {
				continue
			}
			def, err := s.d.columnOf(c.typ)
			if err != nil {
				return fmt.Errorf("adding column %s: %w", c.name, err)
			}
			if _, err := tx.ExecContext(ctx, `ALTER TABLE isolated_devices ADD COLUMN `+c.name+` `+def); err != nil {
				return fmt.Errorf("adding column %s: %w", c.name, err)
			}
			s.log.Info("added the column of a device field", "column", c.name, "definition", def, "dialect", s.d.name)
		}
		return nil
	})
}

// columnDef is the definition of a new record column of type t, given the
// dialect's types for text and flags.
func columnDef(t reflect.Type, text, flag string) (string, error) {
	switch t.Kind() {
	case reflect.String:
		return text + ` NOT NULL DEFAULT ''`, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return `INTEGER NOT NULL DEFAULT 0`, nil
	case reflect.Bool:
		return flag + ` NOT NULL DEFAULT FALSE`, nil
	case reflect.Pointer:
		return text, nil
	}
	return "", fmt.Errorf("a field of type %s needs a migration file", t)
}
