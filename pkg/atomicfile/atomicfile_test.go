package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReplacesWholeWithItsMode(t *testing.T) {
	for name, write := range map[string]func(string, []byte, os.FileMode) error{"Write": Write, "Replace": Replace} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := write(path, []byte("new"), 0o600); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(path)
			fi, _ := os.Stat(path)
			if string(b) != "new" || fi.Mode().Perm() != 0o600 {
				t.Errorf("content %q mode %o, want new and 0600", b, fi.Mode().Perm())
			}
			if stale, _ := Stale(path); len(stale) != 0 {
				t.Errorf("temporary files left: %v", stale)
			}
		})
	}
}

func TestACheckThatFailsLeavesTheOldFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(path, []byte("good"), 0o644); err != nil {
		t.Fatal(err)
	}
	refuse := errors.New("refused")
	var checked string
	err := WriteChecked(path, []byte("bad"), 0o644, func(tmp string) error {
		b, _ := os.ReadFile(tmp)
		checked = string(b)
		return refuse
	})
	if !errors.Is(err, refuse) || checked != "bad" {
		t.Fatalf("err %v, checked %q", err, checked)
	}
	if b, _ := os.ReadFile(path); string(b) != "good" {
		t.Errorf("a refused write changed the file: %q", b)
	}
	if stale, _ := Stale(path); len(stale) != 0 {
		t.Errorf("temporary files left: %v", stale)
	}
}
