package api

// The longest value, in bytes, the inventory keeps for each string field:
// Cloudpods' column widths where Cloudpods has the column, so a row that
// fits here fits a Cloudpods region too; the others are ours. The
// inventory refuses a longer value naming the field, never cuts it, and
// the daemon checks what it sends from host.conf (mps_host_name) against
// the same constants, so check-config refuses what the inventory would.
const (
	MaxNameBytes           = 128 // name (Cloudpods' standalone resources)
	MaxDevTypeBytes        = 128
	MaxSharingModeBytes    = 36
	MaxModelBytes          = 512
	MaxAddrBytes           = 16 // "0000:1a:00.0-15" fits
	MaxVendorDeviceIDBytes = 16
	MaxMdevIDBytes         = 36
	MaxDevicePathBytes     = 128
	MaxRenderPathBytes     = 128
	// MaxCDINameBytes is ours: vendor/class=name of the CDI specification.
	MaxCDINameBytes = 256
	// MaxHostRefBytes bounds a host named by id or name (host_id, host).
	MaxHostRefBytes   = MaxNameBytes
	MaxHostTypeBytes  = 36
	MaxAccessIPBytes  = 64 // Cloudpods keeps IPv4 in 16 and IPv6 apart; one field here
	MaxAccessMACBytes = 32
	// MaxGuestIDBytes is ours: container ids are 64 hex digits.
	MaxGuestIDBytes = 128
)

// MaxDeviceFieldBytes is the bound of the string field of IsolatedDevice
// with that JSON name; ok is false for those bounded elsewhere (id, host_id)
// or not written by clients (the details).
func MaxDeviceFieldBytes(field string) (max int, ok bool) {
	switch field {
	case "name":
		return MaxNameBytes, true
	case "dev_type":
		return MaxDevTypeBytes, true
	case "sharing_mode":
		return MaxSharingModeBytes, true
	case "model":
		return MaxModelBytes, true
	case "addr":
		return MaxAddrBytes, true
	case "vendor_device_id":
		return MaxVendorDeviceIDBytes, true
	case "mdev_id":
		return MaxMdevIDBytes, true
	case "device_path":
		return MaxDevicePathBytes, true
	case "render_path":
		return MaxRenderPathBytes, true
	case "cdi_name":
		return MaxCDINameBytes, true
	case "guest_id":
		return MaxGuestIDBytes, true
	}
	return 0, false
}
