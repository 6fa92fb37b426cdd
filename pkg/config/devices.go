package config

import (
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// TypeNvidiaMPS is the device YAML type this daemon handles; every other type
// in the file belongs to another agent.
const TypeNvidiaMPS = "NVIDIA_MPS"

// DeviceFile is the container device YAML (host_container_device.yml).
type DeviceFile struct {
	Path string
	// Entries are the NVIDIA_MPS entries, in file order, checked.
	Entries []DeviceEntry
	// Skipped are the entries of other types (or with no type), in file
	// order. They are never checked: other agents own them and may use keys
	// and values this daemon knows nothing of.
	Skipped []DeviceEntry
}

// DeviceEntry is one item of the `devices` list.
type DeviceEntry struct {
	// Index is the position in `devices`, from 0, as in "devices[2]".
	Index int
	// Line is where the entry starts in the file.
	Line int
	Path string
	// Type is TypeNvidiaMPS for Entries; as written for Skipped.
	Type string
	// VirtualNumber is N, the number of virtual devices; 0 in Skipped
	// entries that have none (or an unreadable one).
	VirtualNumber int
	// QoS is the entry's mps_qos; nil without one (and in Skipped).
	QoS *MPSQoS
	// Sharing is the entry's sharing; "" without one (fixed slices, as
	// SharingSlices).
	Sharing Sharing
}

// Field names a key of the entry in error messages: "devices[2].path".
func (e DeviceEntry) Field(key string) string {
	return fmt.Sprintf("devices[%d].%s", e.Index, key)
}

// LoadDevices reads and checks the device YAML. A missing file is an error
// that satisfies errors.Is(err, fs.ErrNotExist).
func LoadDevices(path string) (*DeviceFile, error) {
	data, err := ReadFile(path, MaxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("reading container device config: %w", err)
	}
	return ParseDevices(path, data)
}

// ParseDevices checks the device YAML's content; path is used in messages.
// Every problem in NVIDIA_MPS entries is reported, joined with errors.Join,
// each as an *Error with its line. An empty file, or one without `devices`,
// has no entries. The file is read strictly where it is ours (entry.go):
// NVIDIA_MPS entries, an entry whose type is a near miss of it, and the
// `devices` key itself; other agents' entries are left as they are.
func ParseDevices(path string, data []byte) (*DeviceFile, error) {
	df := &DeviceFile{Path: path}
	root, err := parseDocument(path, data)
	if err != nil {
		return nil, err
	}
	if root == nil {
		return df, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, errorf(path, root.Line, "", "want a mapping with a devices list at the top level, got %s", describe(root))
	}
	top, err := readMapping(root)
	if err != nil {
		return nil, errorf(path, root.Line, "", "%v", err)
	}
	if dups := top.dupsOf("devices"); len(dups) > 0 {
		return nil, dupError(path, "devices", dups[0])
	}
	list := top.get("devices")
	if list == nil || isNull(list) {
		return df, nil
	}
	if list.Kind != yaml.SequenceNode {
		return nil, errorf(path, list.Line, "devices", "want a list of devices, got %s", describe(list))
	}
	var errs []error
	for i, item := range list.Content {
		item = deref(item)
		e := DeviceEntry{Index: i, Line: item.Line}
		if item.Kind != yaml.MappingNode {
			// An entry of unknown shape could be anyone's; being unable to
			// tell whether it is ours is an error rather than a silent skip.
			errs = append(errs, errorf(path, item.Line, fmt.Sprintf("devices[%d]", i),
				"want a mapping with path, type and virtual_number, got %s", describe(item)))
			continue
		}
		m, err := readMapping(item)
		if err != nil {
			errs = append(errs, errorf(path, item.Line, fmt.Sprintf("devices[%d]", i), "%v", err))
			continue
		}
		ours, problems := classify(path, e, m)
		if len(problems) > 0 {
			errs = append(errs, problems...)
			continue
		}
		if !ours {
			df.Skipped = append(df.Skipped, skipped(e, m))
			continue
		}
		e.Type = TypeNvidiaMPS
		if problems := readMPSEntry(path, &e, m); len(problems) > 0 {
			errs = append(errs, problems...)
			continue
		}
		df.Entries = append(df.Entries, e)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return df, nil
}

// skipped records another agent's entry as far as it can be read, for the
// caller's log line; nothing in it is checked.
func skipped(e DeviceEntry, m *mapping) DeviceEntry {
	if t := m.get("type"); t != nil && t.Kind == yaml.ScalarNode {
		e.Type = t.Value
	}
	if p := m.get("path"); p != nil && p.Kind == yaml.ScalarNode {
		e.Path = p.Value
	}
	if v := m.get("virtual_number"); v != nil {
		e.VirtualNumber, _ = intValue(v)
	}
	return e
}
