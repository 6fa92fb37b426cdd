package e2e

import (
	"path/filepath"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/viewkit"
)

// viewKits builds the view's test kit (internal/testsupport/viewkit) once
// per test binary.
var viewKits viewkit.Once

// buildViewKit is the kit, built beside the binaries the tests built.
func buildViewKit(t *testing.T) viewkit.Kit {
	t.Helper()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return viewKits.Get(t, repo, filepath.Join(binDir, "viewkit"))
}
