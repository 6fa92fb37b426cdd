package cdi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"

	"go.yaml.in/yaml/v3"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// The spec file is YAML as yaml.v3 writes it (indent 2). yaml.v3's emitter
// queues every event of a document and never drops the ones it has
// written, so one encode of a whole spec (64 entries of 8 GPUs: 143 KB)
// spent a third of its time growing that queue; and a start encodes the
// same edits up to three times (the first spec, then both names of each
// device in the second). So a spec as build makes it is encoded entry by
// entry, each device's edits block once and then taken from the blocks of
// the last encode (editBlocks), with bytes equal to the whole encode's
// (TestEncodeEntriesAsWhole).

// editBlock is one device entry's containerEdits, encoded and indented as
// in the spec.
type editBlock struct {
	edits specs.ContainerEdits
	data  []byte
}

// editBlocks are the blocks of the last encode, by the edits' JSON; a block
// is used only for edits deeply equal to its own, so the key is only a
// hash.
type editBlocks map[string]editBlock

// encode is the file's bytes for s: the header, then s.
func encode(s *specs.Spec) ([]byte, error) {
	data, _, err := encodeEntries(s, nil)
	return data, err
}

// encodeEntries is encode reusing the blocks of known; it returns the
// blocks this spec used, for the next one.
func encodeEntries(s *specs.Spec, known editBlocks) ([]byte, editBlocks, error) {
	var b bytes.Buffer
	b.WriteString(header())
	if !entryWise(s) {
		if err := encodeYAML(&b, s); err != nil {
			return nil, nil, err
		}
		return b.Bytes(), nil, nil
	}
	// specs.Spec's fields in their order; Annotations and ContainerEdits,
	// both omitempty, are empty (entryWise).
	if err := encodeYAML(&b, struct {
		Version string `yaml:"cdiVersion"`
		Kind    string `yaml:"kind"`
	}{s.Version, s.Kind}); err != nil {
		return nil, nil, err
	}
	b.WriteString("devices:\n")
	used := make(editBlocks, len(s.Devices))
	for i := range s.Devices {
		d := &s.Devices[i]
		b.WriteString("  - ")
		if err := encodeYAML(&b, struct {
			Name string `yaml:"name"`
		}{d.Name}); err != nil {
			return nil, nil, err
		}
		block, err := editsBlock(d.ContainerEdits, known, used)
		if err != nil {
			return nil, nil, err
		}
		b.Write(block)
	}
	return b.Bytes(), used, nil
}

// entryWise reports whether s has only what encodeEntries writes entry by
// entry: devices, each a name and edits. Anything else (annotations, edits
// for the whole spec) is encoded whole.
func entryWise(s *specs.Spec) bool {
	if len(s.Annotations) > 0 || !noEdits(&s.ContainerEdits) || len(s.Devices) == 0 {
		return false
	}
	for i := range s.Devices {
		if len(s.Devices[i].Annotations) > 0 {
			return false
		}
	}
	return true
}

// editsBlock is the containerEdits block of an entry: from known or used
// when one holds these edits, else encoded; either way recorded in used.
func editsBlock(e specs.ContainerEdits, known, used editBlocks) ([]byte, error) {
	key, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encoding CDI spec: %w", err)
	}
	for _, blocks := range []editBlocks{used, known} {
		if have, ok := blocks[string(key)]; ok && reflect.DeepEqual(have.edits, e) {
			used[string(key)] = have
			return have.data, nil
		}
	}
	var b bytes.Buffer
	if err := encodeYAML(&b, struct {
		ContainerEdits specs.ContainerEdits `yaml:"containerEdits"`
	}{e}); err != nil {
		return nil, err
	}
	// Under "  - ": the entry's keys sit four columns in.
	data := indent(b.Bytes(), "    ")
	used[string(key)] = editBlock{edits: e, data: data}
	return data, nil
}

// indent puts prefix before every line of text.
func indent(text []byte, prefix string) []byte {
	out := make([]byte, 0, len(text)+len(text)/8)
	for line := range bytes.Lines(text) {
		out = append(out, prefix...)
		out = append(out, line...)
	}
	return out
}

// encodeYAML appends v as one YAML document, indent 2, to b.
func encodeYAML(b *bytes.Buffer, v any) error {
	enc := yaml.NewEncoder(b)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encoding CDI spec: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("encoding CDI spec: %w", err)
	}
	return nil
}
