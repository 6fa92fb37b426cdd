package k8s

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/viewkit"
)

// viewKits builds the view's test kit (internal/testsupport/viewkit) once
// per test binary.
var viewKits viewkit.Once

// buildViewKit is the kit, built beside the binaries the tests built.
func buildViewKit(t *testing.T) viewkit.Kit {
	t.Helper()
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return viewKits.Get(t, repo, filepath.Join(filepath.Dir(daemonBin), "viewkit"))
}

// glibcImage imports viewkit's image, whose programs are the host's.
func (p *podman) glibcImage() string {
	p.t.Helper()
	tarball := filepath.Join(p.t.TempDir(), "rootfs.tar")
	if err := viewkit.WriteGlibcRootfs(tarball); err != nil {
		p.t.Fatal(err)
	}
	name := fmt.Sprintf("localhost/mps-k8s-glibc:%d", time.Now().UnixNano())
	p.run("import", tarball, name)
	return name
}
