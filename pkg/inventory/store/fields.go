package store

import (
	"fmt"
	"strings"

	"yunion.io/x/mps-daemon/pkg/api"
)

// The longest value the store keeps for each string field, in bytes. They
// are Cloudpods' column widths where Cloudpods has the column, so a row
// that fits here fits a Cloudpods region too; the others are ours. A longer
// value is refused with ErrInvalid naming the field, never cut.
const (
	maxNameLen           = 128 // name (Cloudpods' standalone resources)
	maxDevTypeLen        = 128
	maxSharingModeLen    = 36
	maxModelLen          = 512
	maxAddrLen           = 16 // "0000:1a:00.0-15" fits
	maxVendorDeviceIDLen = 16
	maxMdevIDLen         = 36
	maxDevicePathLen     = 128
	maxRenderPathLen     = 128
	// maxCDINameLen is ours: vendor/class=name of the CDI specification.
	maxCDINameLen = 256
	// maxHostRefLen bounds a host named by id or name (host_id, host).
	maxHostRefLen   = maxNameLen
	maxHostTypeLen  = 36
	maxAccessIPLen  = 64 // Cloudpods keeps IPv4 in 16 and IPv6 apart; one field here
	maxAccessMACLen = 32
	// maxGuestIDLen is ours: container ids are 64 hex digits (see
	// guestPattern).
	maxGuestIDLen = 128
)

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

// checkDeviceLengths bounds every string field of d. guest_id has its own
// rule (CheckGuestID) where it is set by attach; here it is only bounded.
func checkDeviceLengths(d api.IsolatedDevice) error {
	return checkLens(
		fieldLen{"name", d.Name, maxNameLen},
		fieldLen{"dev_type", d.DevType, maxDevTypeLen},
		fieldLen{"sharing_mode", d.SharingMode, maxSharingModeLen},
		fieldLen{"model", d.Model, maxModelLen},
		fieldLen{"addr", d.Addr, maxAddrLen},
		fieldLen{"vendor_device_id", d.VendorDeviceID, maxVendorDeviceIDLen},
		fieldLen{"mdev_id", d.MdevID, maxMdevIDLen},
		fieldLen{"device_path", d.DevicePath, maxDevicePathLen},
		fieldLen{"render_path", d.RenderPath, maxRenderPathLen},
		fieldLen{"cdi_name", d.CDIName, maxCDINameLen},
		fieldLen{"guest_id", d.GuestID, maxGuestIDLen},
	)
}

// checkHostLengths bounds every string field of h.
func checkHostLengths(h api.Host) error {
	return checkLens(
		fieldLen{"name", h.Name, maxNameLen},
		fieldLen{"access_ip", h.AccessIP, maxAccessIPLen},
		fieldLen{"access_mac", h.AccessMAC, maxAccessMACLen},
		fieldLen{"host_type", h.HostType, maxHostTypeLen},
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
// Cloudpods shapes it: dev_<host name>_<nanoseconds>. Cut to maxNameLen
// from the host's side, so the distinguishing number stays.
func generatedName(host string, nanos int64) string {
	suffix := fmt.Sprintf("_%d", nanos)
	prefix := "dev_" + host
	if len(prefix)+len(suffix) > maxNameLen {
		prefix = prefix[:maxNameLen-len(suffix)]
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
