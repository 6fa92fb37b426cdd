package entries

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/view"
)

// The library is mountable as a regular file, through a link; missing or
// a directory it is not, and the operator is told which; no library is
// the view off.
func TestLibraryProblemAndDescribeViewView(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, view.LibraryFile)
	link := filepath.Join(dir, "link.so")
	if err := os.WriteFile(lib, []byte("ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(lib, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, problem, describe string
	}{
		{"", "", "off (mps_view_library is empty)"},
		{lib, "", lib + ": containers see their device's cap"},
		{link, "", link + ": containers see their device's cap"},
		{filepath.Join(dir, "gone.so"), "gone.so does not exist", "MISSING, the devices are served without it: "},
		{dir, "is not a regular file", "MISSING, the devices are served without it: "},
	} {
		got := LibraryProblem(tc.path)
		if (tc.problem == "") != (got == "") || !strings.Contains(got, tc.problem) {
			t.Errorf("LibraryProblem(%q) = %q, want %q", tc.path, got, tc.problem)
		}
		if d := DescribeView(tc.path); !strings.HasPrefix(d, tc.describe) {
			t.Errorf("DescribeView(%q) = %q, want it to begin %q", tc.path, d, tc.describe)
		}
	}
}
