// Package pci normalises PCI addresses. NVML and nvidia-smi print bus ids in
// upper-case hex with an 8-digit domain ("00000000:1A:00.0"), sysfs and lspci in
// lower case with 4 digits ("0000:1a:00.0"), Cloudpods' addr drops the domain
// ("1a:00.0"). Comparing those strings as they come is Cloudpods issue 24931
// (GPUs whose bus number has hex letters never matched), so every address is
// parsed into an Address and compared as numbers.
package pci

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
)

// Address is a PCI function address: domain, bus, device, function.
type Address struct {
	Domain   uint32
	Bus      uint8
	Device   uint8
	Function uint8
}

// Parse accepts a PCI address in any case, with or without a domain of 1 to 8
// hex digits: "1A:00.0", "0000:1a:00.0", "00000000:1A:00.0".
func Parse(s string) (Address, error) {
	orig := s
	s = strings.TrimSpace(s)
	parts := strings.Split(s, ":")
	var a Address
	switch len(parts) {
	case 2:
	case 3:
		if len(parts[0]) < 1 || len(parts[0]) > 8 {
			return Address{}, fmt.Errorf("pci address %q: domain must have 1 to 8 hex digits", orig)
		}
		d, err := strconv.ParseUint(parts[0], 16, 32)
		if err != nil {
			return Address{}, fmt.Errorf("pci address %q: bad domain: %w", orig, err)
		}
		a.Domain = uint32(d)
		parts = parts[1:]
	default:
		return Address{}, fmt.Errorf("pci address %q: want [domain:]bus:device.function", orig)
	}
	if len(parts[0]) < 1 || len(parts[0]) > 2 {
		return Address{}, fmt.Errorf("pci address %q: bus must have 1 or 2 hex digits", orig)
	}
	bus, err := strconv.ParseUint(parts[0], 16, 8)
	if err != nil {
		return Address{}, fmt.Errorf("pci address %q: bad bus: %w", orig, err)
	}
	devFn := strings.Split(parts[1], ".")
	if len(devFn) != 2 || len(devFn[0]) < 1 || len(devFn[0]) > 2 || len(devFn[1]) != 1 {
		return Address{}, fmt.Errorf("pci address %q: want device.function after the bus", orig)
	}
	dev, err := strconv.ParseUint(devFn[0], 16, 8)
	if err != nil || dev > 0x1f {
		return Address{}, fmt.Errorf("pci address %q: device must be 00 to 1f", orig)
	}
	fn, err := strconv.ParseUint(devFn[1], 16, 8)
	if err != nil || fn > 7 {
		return Address{}, fmt.Errorf("pci address %q: function must be 0 to 7", orig)
	}
	a.Bus, a.Device, a.Function = uint8(bus), uint8(dev), uint8(fn)
	return a, nil
}

// LooksLike reports whether s has the shape of a PCI address, so callers can
// tell an address that fails to parse from a string that is something else.
func LooksLike(s string) bool {
	s = strings.TrimSpace(s)
	return strings.Count(s, ":") >= 1 && strings.Count(s, ":") <= 2 && strings.Contains(s, ".") && !strings.Contains(s, "/")
}

// String is the sysfs form: "0000:1a:00.0".
func (a Address) String() string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", a.Domain, a.Bus, a.Device, a.Function)
}

// Short is the form Cloudpods puts in `addr`, without the domain: "1a:00.0".
func (a Address) Short() string {
	return fmt.Sprintf("%02x:%02x.%x", a.Bus, a.Device, a.Function)
}

// NVML is the form NVML prints: "00000000:1A:00.0".
func (a Address) NVML() string {
	return fmt.Sprintf("%08X:%02X:%02X.%X", a.Domain, a.Bus, a.Device, a.Function)
}

// Compare orders addresses as the bus enumerates them: -1 when a comes
// before b, 1 after, 0 when equal (the form slices.SortFunc takes).
func (a Address) Compare(b Address) int {
	return cmp.Or(cmp.Compare(a.Domain, b.Domain), cmp.Compare(a.Bus, b.Bus),
		cmp.Compare(a.Device, b.Device), cmp.Compare(a.Function, b.Function))
}

// Less orders addresses as the bus enumerates them.
func (a Address) Less(b Address) bool { return a.Compare(b) < 0 }

// MarshalText is the sysfs form (String), as JSON carries an address.
func (a Address) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText reads any form Parse takes.
func (a *Address) UnmarshalText(b []byte) error {
	p, err := Parse(string(b))
	if err != nil {
		return err
	}
	*a = p
	return nil
}
