package config

import (
	"bufio"
	"bytes"
	"strings"

	"go.yaml.in/yaml/v3"
)

// parseKeyValueLines reads host.conf in the other form Cloudpods accepts
// when a file is not YAML (structarg's ParseTornadoFile): `key = value` lines,
// `#` comments, `[section]` lines ignored, quotes around a value dropped. It
// returns the same mapping node a YAML file gives, with each key's line, so
// everything after reads both forms alike; ok is false when a line is
// neither, and the YAML error stands.
func parseKeyValueLines(data []byte) (root *yaml.Node, ok bool) {
	root = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: 1}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '[' {
			continue
		}
		k, v, found := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !found || k == "" {
			return nil, false
		}
		v = strings.TrimSpace(v)
		val := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: unquote(v), Line: n}
		if v == "" {
			val.Tag = "!!null"
		}
		root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k, Line: n}, val)
	}
	if sc.Err() != nil || len(root.Content) == 0 {
		return nil, false
	}
	return root, true
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}
