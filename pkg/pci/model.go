package pci

import (
	"fmt"
	"strings"

	"github.com/jaypipes/pcidb"
)

// Models names GPU models the way Cloudpods' host agent does in the rows it
// registers: the bracketed part of the device name lspci prints from the
// pci.ids database ("GH100 [H100 SXM5 80GB]" gives "H100 SXM5 80GB"), and
// the driver's name (nvidia-smi's, NVML's) when pci.ids has none. Rows
// written by either agent then carry the same model.
type Models struct {
	models map[string]string // "10de:2330" -> the bracketed model of its pci.ids name
}

// LoadModels reads pci.ids: the file at path, or, when path is empty, the
// system's (/usr/share/hwdata, /usr/share/misc, PCIDB_PATH). It never
// fetches one over the network.
func LoadModels(path string) (*Models, error) {
	off := false
	opts := []*pcidb.WithOption{{EnableNetworkFetch: &off}}
	if path != "" {
		opts = append(opts, pcidb.WithPath(path))
	}
	db, err := pcidb.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("reading the pci.ids database: %w", err)
	}
	// Only the names with a bracketed model are kept, as that model: the
	// others give the fallback anyway, and the whole database would stay
	// in the daemon's heap (its live heap 2.3 MiB after loading the 2023
	// pci.ids, 0.4 MiB so).
	m := &Models{models: map[string]string{}}
	for _, p := range db.Products {
		if model := BracketedModel(p.Name); model != "" {
			m.models[strings.ToLower(p.VendorID+":"+p.ID)] = strings.Clone(model)
		}
	}
	return m, nil
}

// Model is the model of a device with vendorDeviceID ("10de:2330"), or
// fallback when pci.ids has no bracketed name for it. A nil Models always
// gives fallback.
func (m *Models) Model(vendorDeviceID, fallback string) string {
	if m == nil {
		return fallback
	}
	if model := m.models[strings.ToLower(vendorDeviceID)]; model != "" {
		return model
	}
	return fallback
}

// BracketedModel is the model lspci's device name carries in its last
// brackets, as Cloudpods reads it: "GH100 [H100 SXM5 80GB]" gives
// "H100 SXM5 80GB"; a name without brackets gives "".
func BracketedModel(deviceName string) string {
	end := strings.LastIndexByte(deviceName, ']')
	if end < 0 {
		return ""
	}
	start := strings.LastIndex(deviceName[:end], " [")
	if start <= 0 {
		return ""
	}
	return deviceName[start+2 : end]
}
