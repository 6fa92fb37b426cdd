package config

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// An NVIDIA_MPS entry is read strictly, because a misread is silent and
// costly: a typo in a key or a type used to make the entry "another agent's",
// so every GPU fell back to cuda_mps_replicas. Cloudpods' own host agent
// reads the same file and ignores keys it does not know, so keys added here
// (issue 13's mps_qos, qos.go) do not disturb it.

// mpsKey is one key of an NVIDIA_MPS entry.
type mpsKey struct {
	// read stores the value in the entry, or says what is wrong with it.
	read func(e *DeviceEntry, v *yaml.Node) error
	// nested, for a key whose value has keys of its own, reads it and
	// returns its problems located at their own lines; used instead of read.
	nested func(file string, e *DeviceEntry, v *yaml.Node) []error
	// missing is the message for an entry without the key; empty for an
	// optional key.
	missing string
}

// mpsKeys are the keys an NVIDIA_MPS entry may have: any other key in such
// an entry is an error naming its line (typo protection). Adding a key is
// one line here and its field in DeviceEntry.
var mpsKeys = map[string]mpsKey{
	"type": {read: func(*DeviceEntry, *yaml.Node) error { return nil }}, // checked by classify
	"path": {read: readPath, missing: "missing: an NVIDIA_MPS entry must name its GPU"},
	"virtual_number": {read: func(e *DeviceEntry, v *yaml.Node) (err error) {
		e.VirtualNumber, err = virtualNumber(v)
		return err
	}, missing: "missing: say how many virtual devices to split the GPU into"},
	"mps_qos": {nested: readQoS},
	"sharing": {read: readSharing},
}

func readPath(e *DeviceEntry, v *yaml.Node) error {
	s, err := nonEmpty(v)
	e.Path = strings.TrimSpace(s)
	return err
}

// readMPSEntry reads the keys of an NVIDIA_MPS entry, returning every
// problem found: keys set twice, keys it does not take, missing and bad
// values.
func readMPSEntry(file string, e *DeviceEntry, m *mapping) []error {
	var errs []error
	for _, d := range m.dups {
		errs = append(errs, dupError(file, e.Field(d.key), d))
	}
	for _, p := range m.pairs {
		if _, known := mpsKeys[p.key.Value]; !known || p.key.Kind != yaml.ScalarNode {
			errs = append(errs, errorf(file, p.key.Line, e.Field(keyName(p.key)),
				"unknown key in an NVIDIA_MPS entry (it takes %s)", knownKeys()))
		}
	}
	for _, name := range sortedKeys() {
		k := mpsKeys[name]
		v := m.get(name)
		if v == nil || isNull(v) {
			if k.missing != "" {
				errs = append(errs, errorf(file, e.Line, e.Field(name), "%s", k.missing))
			}
			continue
		}
		if k.nested != nil {
			errs = append(errs, k.nested(file, e, v)...)
			continue
		}
		if err := k.read(e, v); err != nil {
			errs = append(errs, errorf(file, v.Line, e.Field(name), "%v", err))
		}
	}
	if len(errs) == 0 {
		errs = append(errs, checkQoSSlices(file, e)...)
	}
	if len(errs) == 0 {
		errs = append(errs, checkSharing(file, e, m)...)
	}
	slices.SortStableFunc(errs, func(a, b error) int { return a.(*Error).Line - b.(*Error).Line })
	return errs
}

// classify tells whether an entry is ours: its type is exactly NVIDIA_MPS.
// An entry whose type is a near miss of NVIDIA_MPS (another case, `-` for
// `_`, one letter off, a list holding it) or that sets type twice with one
// of them ours is an error naming the line: it was meant to be ours, and
// skipping it as another agent's would silently change the plan. Entries
// without a type, or of another type, are other agents'.
func classify(file string, e DeviceEntry, m *mapping) (ours bool, errs []error) {
	t := m.get("type")
	if t == nil || isNull(t) {
		return false, nil
	}
	dups := m.dupsOf("type")
	meant := mentionsMPS(t)
	for _, d := range dups {
		if mentionsMPS(d.value) {
			meant = true
		}
	}
	if !meant {
		return false, nil
	}
	for _, d := range dups {
		errs = append(errs, dupError(file, e.Field("type"), d))
	}
	if len(errs) > 0 {
		return false, errs
	}
	switch {
	case t.Kind != yaml.ScalarNode:
		errs = append(errs, errorf(file, t.Line, e.Field("type"), "want the single value %s, got %s", TypeNvidiaMPS, describe(t)))
	case t.Value != TypeNvidiaMPS:
		errs = append(errs, errorf(file, t.Line, e.Field("type"),
			"%q is not %s: types are exact; write %s (an entry of another agent needs that agent's type)", t.Value, TypeNvidiaMPS, TypeNvidiaMPS))
	}
	return len(errs) == 0, errs
}

// mentionsMPS reports a type value that is NVIDIA_MPS or a near miss of it,
// also inside a list or mapping. Aliases can make a small file a huge tree,
// so it looks at no more than maxMergePairs nodes.
func mentionsMPS(n *yaml.Node) bool {
	budget := maxMergePairs
	var walk func(n *yaml.Node, depth int) bool
	walk = func(n *yaml.Node, depth int) bool {
		n = deref(n)
		if budget--; n == nil || depth > maxMergeDepth || budget < 0 {
			return false
		}
		if n.Kind == yaml.ScalarNode {
			return n.Value == TypeNvidiaMPS || nearMiss(n.Value)
		}
		for _, c := range n.Content {
			if walk(c, depth+1) {
				return true
			}
		}
		return false
	}
	return walk(n, 0)
}

// nearMiss reports a type an operator most likely meant as NVIDIA_MPS: the
// same name in another case, with `-`, `.` or a space for `_`, without the
// `_`, or one letter added, dropped or changed, or two neighbours swapped. No other agent's type
// Cloudpods knows is that close (NVIDIA_GPU is two letters off).
func nearMiss(s string) bool {
	if s == TypeNvidiaMPS {
		return false
	}
	n := strings.ToUpper(strings.TrimSpace(s))
	n = strings.NewReplacer("-", "_", ".", "_", " ", "_").Replace(n)
	if n == TypeNvidiaMPS || strings.ReplaceAll(n, "_", "") == strings.ReplaceAll(TypeNvidiaMPS, "_", "") {
		return true
	}
	return withinOneEdit(n, TypeNvidiaMPS)
}

// withinOneEdit reports whether a and b differ by at most one inserted,
// deleted or changed byte, or one swap of neighbouring bytes.
func withinOneEdit(a, b string) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	if len(b)-len(a) > 1 {
		return false
	}
	i := 0
	for i < len(a) && a[i] == b[i] {
		i++
	}
	if len(a) == len(b) {
		if i+1 < len(a) && a[i] == b[i+1] && a[i+1] == b[i] { // two letters swapped
			return a[i+2:] == b[i+2:]
		}
		return a[i+min(1, len(a)-i):] == b[i+min(1, len(b)-i):]
	}
	return a[i:] == b[i+1:]
}

// dupError names both lines of a key set twice.
func dupError(file, field string, d duplicate) *Error {
	return errorf(file, d.again.Line, field, "set again (first at line %d); YAML keys must be unique", d.first.Line)
}

// keyName is a key as an error names it.
func keyName(k *yaml.Node) string {
	if k.Kind == yaml.ScalarNode {
		return k.Value
	}
	return describe(k)
}

func sortedKeys() []string {
	keys := make([]string, 0, len(mpsKeys))
	for k := range mpsKeys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// knownKeys lists mpsKeys for a message: "path, type and virtual_number".
func knownKeys() string {
	keys := sortedKeys()
	return fmt.Sprintf("%s and %s", strings.Join(keys[:len(keys)-1], ", "), keys[len(keys)-1])
}
