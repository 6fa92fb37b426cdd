package pod

import (
	"path/filepath"
	"strings"
	"testing"
)

// Whatever a cgroup file holds, a container id found in it is one that
// joins to a path below the directory it is joined to.
func FuzzContainerOf(f *testing.F) {
	for _, s := range []string{"0::/cloudpods/" + ctr + "\n", "4:memory:/cloudpods/a\n0::/cloudpods/b\n", "0::/cloudpods/../x", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, cg []byte) {
		id, err := ContainerOf(cg, "/cloudpods")
		if err != nil {
			if id != "" {
				t.Errorf("an error with an id: %q %v", id, err)
			}
			return
		}
		if p := filepath.Join("/state", id); filepath.Dir(p) != "/state" || strings.ContainsAny(id, "/\x00") {
			t.Errorf("id %q leaves the directory: %s", id, p)
		}
	})
}
