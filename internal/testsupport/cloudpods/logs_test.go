package cloudpods

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFailedStartShowsTheLogsEnds: a start that fails says why in the
// control plane's own words, the end of each log, read before the work
// directory goes.
func TestFailedStartShowsTheLogsEnds(t *testing.T) {
	work := t.TempDir()
	if err := os.MkdirAll(filepath.Join(work, "log"), 0o755); err != nil {
		t.Fatal(err)
	}
	region := strings.Repeat("noise\n", 1000) + "listen tcp 127.0.0.1:40001: bind: address already in use\n"
	if err := os.WriteFile(filepath.Join(work, "log", "region.log"), []byte(region), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "log", "keystone.log"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(work, "log", "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	got := logTails(work)
	if !strings.Contains(got, "--- region.log (its end) ---") || !strings.HasSuffix(got, "bind: address already in use\n") {
		t.Fatalf("the region log's end is missing:\n%s", got)
	}
	if len(got) > 2100 {
		t.Errorf("%d bytes: each log's tail should be at most 2000", len(got))
	}
	if strings.Contains(got, "keystone.log") || strings.Contains(got, "adir") {
		t.Errorf("an empty log or a directory was shown:\n%s", got)
	}
	if logTails(filepath.Join(work, "missing")) != "" {
		t.Error("a work directory without logs gave text")
	}
}
