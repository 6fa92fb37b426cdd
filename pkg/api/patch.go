package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
)

// patchField pairs a field of DevicePatch with IsolatedDevice's field of
// the same name (indexes into each struct).
type patchField struct {
	patch, device int
	// set is the index of the Set<Name> flag of a field of the record's
	// own type (PCIEInfo), -1 for a pointer field.
	set     int
	nonzero bool
}

// patchFields is computed once from the two structs' declarations, never
// changed: Apply and PatchOf go by it, so a field declared in both is
// patched without more code.
var patchFields = pairPatchFields()

func pairPatchFields() []patchField {
	pt, dt := reflect.TypeFor[DevicePatch](), reflect.TypeFor[IsolatedDevice]()
	var out []patchField
	for i := range pt.NumField() {
		f := pt.Field(i)
		if f.Tag.Get("patch") == "identity" || f.Type.Kind() == reflect.Bool {
			continue // not a change, or a Set<Name> flag
		}
		df, ok := dt.FieldByName(f.Name)
		if !ok {
			panic(fmt.Sprintf("api: DevicePatch.%s names no field of IsolatedDevice", f.Name))
		}
		pf := patchField{patch: i, device: df.Index[0], set: -1, nonzero: f.Tag.Get("patch") == "nonzero"}
		switch {
		case f.Type == reflect.PointerTo(df.Type):
		case f.Type == df.Type:
			flag, ok := pt.FieldByName("Set" + f.Name)
			if !ok || flag.Type.Kind() != reflect.Bool {
				panic(fmt.Sprintf("api: DevicePatch.%s has no Set%[1]s flag", f.Name))
			}
			pf.set = flag.Index[0]
		default:
			panic(fmt.Sprintf("api: DevicePatch.%s is neither *%s nor %[2]s", f.Name, df.Type))
		}
		out = append(out, pf)
	}
	return out
}

// Apply makes d what p says; it checks nothing (the store does).
func (p DevicePatch) Apply(d *IsolatedDevice) {
	pv, dv := reflect.ValueOf(p), reflect.ValueOf(d).Elem()
	for _, f := range patchFields {
		v := pv.Field(f.patch)
		switch {
		case f.set >= 0:
			if pv.Field(f.set).Bool() {
				dv.Field(f.device).Set(v)
			}
		case !v.IsNil() && !(f.nonzero && v.Elem().IsZero()):
			dv.Field(f.device).Set(v.Elem())
		}
	}
}

// PatchOf is the patch that makes a device d (every field but the
// identity: id, host_id, created_at).
func PatchOf(d IsolatedDevice) DevicePatch {
	var p DevicePatch
	pv, dv := reflect.ValueOf(&p).Elem(), reflect.ValueOf(&d).Elem()
	for _, f := range patchFields {
		if f.set >= 0 {
			pv.Field(f.set).SetBool(true)
			pv.Field(f.patch).Set(dv.Field(f.device))
			continue
		}
		pv.Field(f.patch).Set(dv.Field(f.device).Addr())
	}
	return p
}

// MarshalJSON writes the fields p sets, pcie_info null when it clears it.
func (p DevicePatch) MarshalJSON() ([]byte, error) {
	type fields DevicePatch
	b, err := json.Marshal(fields(p))
	if err != nil || !p.SetPCIEInfo || p.PCIEInfo != nil {
		return b, err
	}
	if bytes.Equal(b, []byte("{}")) {
		return []byte(`{"pcie_info":null}`), nil
	}
	return append(b[:len(b)-1], []byte(`,"pcie_info":null}`)...), nil
}
