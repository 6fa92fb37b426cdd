package mps

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// shortTemp is a directory whose socket paths fit 107 bytes.
func shortTemp(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "p")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// listening tells a socket a process listens on from one nobody does (a
// control daemon's socket left after it was killed, a placeholder).
func TestListening(t *testing.T) {
	dir := shortTemp(t)
	live := filepath.Join(dir, "live")
	ln, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	if !listening(live) {
		t.Error("a listening socket taken for a dead one")
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if listening(live) {
		t.Error("a socket nobody listens on any more taken for a live one")
	}
	dead := filepath.Join(dir, "dead")
	if err := makePlaceholder(dead); err != nil {
		t.Fatal(err)
	}
	if listening(dead) || listening(filepath.Join(dir, "none")) {
		t.Error("a placeholder or nothing taken for a live socket")
	}
}

// The placeholder is a socket of mode 0000 whatever the umask, made in one
// rename over what was there.
func TestPlaceholder(t *testing.T) {
	dir := shortTemp(t)
	p := filepath.Join(dir, PrivilegedSocket)
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := makePlaceholder(p); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(p)
	if err != nil || !placeholder(fi) {
		t.Fatalf("%v, %v; want a socket of mode 0000", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
}

// privateDir makes the directory 0700, tightens a looser one, and refuses
// a link or a file in its place.
func TestPrivateDir(t *testing.T) {
	dir := shortTemp(t)
	d := filepath.Join(dir, "a.privileged", "GPU-x")
	if err := privateDir(d); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{d, filepath.Dir(d)} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, %v; want 0700", p, fi.Mode(), err)
		}
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := privateDir(d); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(d); fi.Mode().Perm() != 0o700 {
		t.Errorf("a looser directory left %v", fi.Mode())
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(d, link); err != nil {
		t.Fatal(err)
	}
	if err := privateDir(link); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a link in its place: %v", err)
	}
}
