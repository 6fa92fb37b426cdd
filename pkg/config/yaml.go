package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// parseDocument reads the one YAML document of a file as a node tree, so every
// value keeps its line. It returns nil for a file that holds no document
// (empty, or only comments).
func parseDocument(file string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, syntaxError(file, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, syntaxError(file, err)
	default:
		// A second document would be silently ignored by a plain Unmarshal;
		// settings in it would look set but never apply.
		return nil, errorf(file, next.Line, "", "holds more than one YAML document (a second one starts here)")
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	root := deref(doc.Content[0])
	if isNull(root) {
		return nil, nil
	}
	return root, nil
}

// deref follows an alias (`*name`) to the node it names.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// isNull reports an empty value (`key:`, `key: null`, `key: ~`).
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// describe names a value in an error message.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "an empty value"
		}
		return strconv.Quote(n.Value)
	}
	return "an unexpected YAML node"
}

// scalarValue returns the text of a scalar, or a message saying what the
// value is instead.
func scalarValue(n *yaml.Node) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", fmt.Errorf("want a single value, got %s", describe(n))
	}
	return n.Value, nil
}

// intValue reads a whole number. A quoted number ("4") is accepted too: the
// files are hand-written and the intent is clear.
func intValue(n *yaml.Node) (int, error) {
	s, err := scalarValue(n)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || isNull(n) {
		return 0, fmt.Errorf("want a whole number, got %s", describe(n))
	}
	return v, nil
}

// boolValue reads true/false, also in the YAML 1.1 spellings (yes/no, on/off)
// that older Cloudpods host.conf files use.
func boolValue(n *yaml.Node) (bool, error) {
	s, err := scalarValue(n)
	if err != nil {
		return false, err
	}
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "yes", "on":
		return true, nil
	case "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("want true or false, got %s", describe(n))
}

// maxSeconds keeps a bare number of seconds inside time.Duration.
const maxSeconds = int64(1<<63-1) / int64(time.Second)

// durationValue reads a duration in Go's form ("10s", "1m30s") or a bare
// whole number of seconds, and requires it to be positive.
func durationValue(n *yaml.Node) (time.Duration, error) {
	s, err := scalarValue(n)
	if err != nil {
		return 0, err
	}
	s = strings.TrimSpace(s)
	var d time.Duration
	if secs, err := strconv.ParseInt(s, 10, 64); err == nil {
		if secs > maxSeconds || secs < -maxSeconds {
			return 0, fmt.Errorf("%s seconds is out of range", s)
		}
		d = time.Duration(secs) * time.Second
	} else if d, err = time.ParseDuration(s); err != nil {
		return 0, fmt.Errorf(`want a duration such as "10s" or a number of seconds, got %s`, describe(n))
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be positive, got %s", describe(n))
	}
	return d, nil
}
