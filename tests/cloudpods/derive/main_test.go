package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/replay"
)

// The committed cassettes are what derive makes of the first recordings
// (kept beside the project, ../shared/cloudpods-run/recordings, or where
// MPS_CLOUDPODS_RAW says): derive is the one way they are made. A cassette
// recorded again since (make test-cloudpods: its source says so) is not
// compared.
func TestCassettesAreDerivedFromTheRecordings(t *testing.T) {
	raw := os.Getenv("MPS_CLOUDPODS_RAW")
	if raw == "" {
		raw = filepath.Join("..", "..", "..", "..", "shared", "cloudpods-run", "recordings")
	}
	if _, err := os.Stat(filepath.Join(raw, "region-backend-tests.jsonl")); err != nil {
		t.Skipf("no recordings to derive from at %s (MPS_CLOUDPODS_RAW): %v", raw, err)
	}
	tmp := t.TempDir()
	var log bytes.Buffer
	if err := deriveAll(raw, tmp, &log); err != nil {
		t.Fatal(err)
	}
	committed := filepath.Join("..", "recordings")
	n := 0
	err := filepath.WalkDir(tmp, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(tmp, path)
		got, _ := os.ReadFile(path)
		want, err := os.ReadFile(filepath.Join(committed, rel))
		if c, lerr := replay.Load(filepath.Join(committed, rel)); lerr == nil && strings.Contains(c.Source, "make test-cloudpods") {
			return nil
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s differs from what derive makes of the recordings (go run ./tests/cloudpods/derive -from %s): %v", rel, raw, err)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("derive made %d cassettes:\n%s", n, log.String())
	}
}
