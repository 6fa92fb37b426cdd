package api

import (
	"reflect"
	"strings"
)

// What Cloudpods' host agent does with the record's fields, read from
// their hostagent tags (see IsolatedDevice): a region backend writes and
// compares rows as it does without naming the fields.

type hostAgentField struct {
	name, when string
	field      int
}

// hostAgentFields are read once from the record's declaration, never
// changed.
var hostAgentFields = func() []hostAgentField {
	var out []hostAgentField
	t := reflect.TypeFor[IsolatedDevice]()
	for i := range t.NumField() {
		if when := t.Field(i).Tag.Get("hostagent"); when != "" {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			out = append(out, hostAgentField{name: name, when: when, field: i})
		}
	}
	return out
}()

// HostAgentFields are the fields of d Cloudpods' host agent sends, by JSON
// name: the "always" ones, and the others when set.
func HostAgentFields(d IsolatedDevice) map[string]any {
	m := make(map[string]any, len(hostAgentFields))
	v := reflect.ValueOf(d)
	for _, f := range hostAgentFields {
		if fv := v.Field(f.field); f.when == "always" || isSet(fv) {
			m[f.name] = fv.Interface()
		}
	}
	return m
}

// HostAgentChanged is Cloudpods' host agent's test of whether a row cur
// needs an update to be want, over the fields it sends: one differs, or a
// "once" field is set in want and not in cur.
func HostAgentChanged(cur, want IsolatedDevice) bool {
	cv, wv := reflect.ValueOf(cur), reflect.ValueOf(want)
	for _, f := range hostAgentFields {
		c, w := cv.Field(f.field), wv.Field(f.field)
		if f.when == "once" && isSet(w) && !isSet(c) || f.when != "once" && !reflect.DeepEqual(c.Interface(), w.Interface()) {
			return true
		}
	}
	return false
}

// isSet is the host agent's test for sending a field: a number > 0, a
// string not empty, a pointer not nil.
func isSet(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Int, reflect.Int64:
		return v.Int() > 0
	case reflect.Pointer:
		return !v.IsNil()
	}
	return !v.IsZero()
}
