package config

import (
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// pair is one key of a mapping with its value.
type pair struct {
	key, value *yaml.Node
}

// duplicate is a key a mapping sets twice: YAML forbids it, yaml.v3's node
// tree keeps both, and a plain lookup would silently take one of them.
type duplicate struct {
	key          string
	first, again *yaml.Node // the two key nodes
	value        *yaml.Node // the value set again
}

// mapping is a YAML mapping with its merge keys (`<<: *base`) resolved as
// YAML defines them: a key the mapping sets itself wins over a merged one,
// and of several merged mappings the first that sets a key wins. Keys are in
// file order, the merged ones after the mapping's own.
type mapping struct {
	pairs []pair
	index map[string]int
	// dups are the keys set twice in the mapping itself or in a mapping
	// merged into it.
	dups []duplicate
}

// Merge keys may nest (a merged mapping merging another); these bounds keep
// a hostile file from making the resolution exponential.
const (
	maxMergeDepth = 8
	maxMergePairs = 10000
)

var errMergeTooBig = errors.New("merge keys (<<) nest too deep or merge too many keys")

// readMapping resolves m, which must be a mapping node.
func readMapping(m *yaml.Node) (*mapping, error) {
	mp := &mapping{index: map[string]int{}}
	budget := maxMergePairs
	if err := mp.add(m, 0, &budget); err != nil {
		return nil, err
	}
	return mp, nil
}

// add puts m's own keys first, then merges what its `<<` keys name.
func (mp *mapping) add(m *yaml.Node, depth int, budget *int) error {
	if depth > maxMergeDepth {
		return errMergeTooBig
	}
	own := map[string]*yaml.Node{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], deref(m.Content[i+1])
		if *budget--; *budget < 0 {
			return errMergeTooBig
		}
		if isMergeKey(k) {
			merges = append(merges, v)
			continue
		}
		if first, dup := own[k.Value]; dup {
			mp.addDup(duplicate{key: k.Value, first: first, again: k, value: v})
			continue
		}
		own[k.Value] = k
		if _, set := mp.index[k.Value]; set {
			continue // set by the mapping this one is merged into
		}
		mp.index[k.Value] = len(mp.pairs)
		mp.pairs = append(mp.pairs, pair{key: k, value: v})
	}
	for _, v := range merges {
		sources := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			sources = v.Content
		}
		for _, src := range sources {
			src = deref(src)
			if src.Kind != yaml.MappingNode {
				return fmt.Errorf("line %d: a merge key (<<) takes a mapping or a list of mappings, got %s", src.Line, describe(src))
			}
			if err := mp.add(src, depth+1, budget); err != nil {
				return err
			}
		}
	}
	return nil
}

// addDup records a duplicate once, however often its mapping is merged.
func (mp *mapping) addDup(d duplicate) {
	for _, seen := range mp.dups {
		if seen.again == d.again {
			return
		}
	}
	mp.dups = append(mp.dups, d)
}

// isMergeKey is YAML's `<<` key (a quoted "<<" is an ordinary key).
func isMergeKey(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Tag == "!!merge"
}

// get returns the value of key, nil when absent.
func (mp *mapping) get(key string) *yaml.Node {
	if i, ok := mp.index[key]; ok {
		return mp.pairs[i].value
	}
	return nil
}

// keyNode returns the node of key, nil when absent.
func (mp *mapping) keyNode(key string) *yaml.Node {
	if i, ok := mp.index[key]; ok {
		return mp.pairs[i].key
	}
	return nil
}

// dupsOf returns the duplicates of one key.
func (mp *mapping) dupsOf(key string) []duplicate {
	var out []duplicate
	for _, d := range mp.dups {
		if d.key == key {
			out = append(out, d)
		}
	}
	return out
}
