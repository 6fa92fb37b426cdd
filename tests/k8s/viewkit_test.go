package k8s

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/viewkit"
)

var (
	viewKitOnce sync.Once
	viewKit     viewkit.Kit
	viewKitErr  error
)

// buildViewKit builds the view's test kit (internal/testsupport/viewkit)
// once per test binary, beside the daemon it built; a machine without make
// or cc skips the test, or fails it under MPS_REQUIRE_PODMAN=1.
func buildViewKit(t *testing.T) viewkit.Kit {
	t.Helper()
	viewKitOnce.Do(func() {
		repo, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			viewKitErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		viewKit, viewKitErr = viewkit.Build(ctx, repo, filepath.Join(filepath.Dir(daemonBin), "viewkit"))
	})
	if viewKitErr != nil {
		if os.Getenv("MPS_REQUIRE_PODMAN") == "1" {
			t.Fatal(viewKitErr)
		}
		t.Skip(viewKitErr)
	}
	return viewKit
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
