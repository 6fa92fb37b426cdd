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
