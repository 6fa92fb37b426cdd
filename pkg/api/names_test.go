package api

import "testing"

// TestNameProblem: the names a host may have, as Cloudpods' region takes
// names (not held to ASCII), and those refused, each with its reason.
func TestNameProblem(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"gpu-node_01.dc1@rack2", true},
		{"GPU 节点 1", true},
		{"../../x", false},
		{`a\b`, false},
		{"a;b", false},
		{"a\nb", false},
		{"a\tb", false},
		{"é\u202e/x", false},
		{"gpu\u202e1", false},
		{"zero\u200bwidth", false},
		{"bad\xffutf8", false},
	} {
		if why := NameProblem(c.name); (why == "") != c.ok {
			t.Errorf("NameProblem(%q) = %q, want ok %v", c.name, why, c.ok)
		}
	}
}
