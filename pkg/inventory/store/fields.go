package store

import (
	"fmt"
	"reflect"
	"strings"

	"yunion.io/x/mps-daemon/pkg/api"
)

// Every string field is bounded by pkg/api's Max*Bytes (Cloudpods' column
// widths where it has the column); a longer value is refused with
// ErrInvalid naming the field, never cut.

// checkLen refuses v when it is longer than max bytes.
func checkLen(field, v string, max int) error {
	if len(v) > max {
		return refuse(ErrInvalid, "field %s: %d bytes, longer than the %d allowed", field, len(v), max)
	}
	return nil
}

// checkLens checks each field of fs in order and returns the first refusal.
func checkLens(fs ...fieldLen) error {
	for _, f := range fs {
		if err := checkLen(f.name, f.v, f.max); err != nil {
			return err
		}
	}
	return nil
}

type fieldLen struct {
	name, v string
	max     int
}

// checkDeviceLengths bounds every string field of d (api.MaxDeviceFieldBytes,
// in the record's order). guest_id has its own rule (CheckGuestID) where it
// is set by attach; here it is only bounded.
func checkDeviceLengths(d api.IsolatedDevice) error {
	v := reflect.ValueOf(d)
	for _, c := range recordColumns {
		if max, ok := api.MaxDeviceFieldBytes(c.name); ok {
			if err := checkLen(c.name, v.Field(c.field).String(), max); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkHostLengths bounds every string field of h, and refuses a name
// that is no name (api.NameProblem).
func checkHostLengths(h api.Host) error {
	if why := api.NameProblem(h.Name); why != "" {
		return refuse(ErrInvalid, "field name: %s", why)
	}
	return checkLens(
		fieldLen{"name", h.Name, api.MaxNameBytes},
		fieldLen{"access_ip", h.AccessIP, api.MaxAccessIPBytes},
		fieldLen{"access_mac", h.AccessMAC, api.MaxAccessMACBytes},
		fieldLen{"host_type", h.HostType, api.MaxHostTypeBytes},
	)
}

// newDeviceDefaults fills what a new device gets when the caller left it
// out: VirtualNum 1 (one guest per row, Cloudpods' default).
func newDeviceDefaults(d api.IsolatedDevice) api.IsolatedDevice {
	if d.VirtualNum == 0 {
		d.VirtualNum = 1
	}
	return d
}

// generatedName is the name of a device created without one, shaped as
// Cloudpods shapes it: dev_<host name>_<nanoseconds>. Cut to api.MaxNameBytes
// from the host's side, so the distinguishing number stays.
func generatedName(host string, nanos int64) string {
	suffix := fmt.Sprintf("_%d", nanos)
	prefix := "dev_" + host
	if len(prefix)+len(suffix) > api.MaxNameBytes {
		prefix = prefix[:api.MaxNameBytes-len(suffix)]
	}
	return prefix + suffix
}

// vendors are the PCI vendor ids Cloudpods names in an isolated device's
// vendor (the rest show the id itself).
var vendors = map[string]string{
	"10de": "NVIDIA",
	"1002": "AMD",
	"1ec6": "VASTAITECH",
	"19e5": "ASCEND",
	"1d94": "HYGON",
}

// VendorOf is the vendor of a vendor_device_id ("10de:1b38" is NVIDIA), as
// Cloudpods shows it: the name of a known PCI vendor id, else the id.
func VendorOf(vendorDeviceID string) string {
	id, _, _ := strings.Cut(vendorDeviceID, ":")
	if name, ok := vendors[strings.ToLower(id)]; ok {
		return name
	}
	return id
}

// vendorID is the PCI vendor id a vendor filter names: a known vendor's
// name (any case) or the id itself.
func vendorID(vendor string) string {
	for id, name := range vendors {
		if strings.EqualFold(name, vendor) {
			return id
		}
	}
	return strings.ToLower(vendor)
}
