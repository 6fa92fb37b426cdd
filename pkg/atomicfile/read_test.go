package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestRead: a regular file is read; a FIFO without a writer is refused at
// once (not waited on), a file over the limit is never read whole, a link
// is followed or refused as asked, a missing file is fs.ErrNotExist.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	file, fifo, big, link := filepath.Join(dir, "f"), filepath.Join(dir, "fifo"), filepath.Join(dir, "big"), filepath.Join(dir, "link")
	if err := os.WriteFile(file, []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, make([]byte, 11), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	if b, err := Read(file, 10, false); err != nil || string(b) != "ok" {
		t.Errorf("Read(file) = %q, %v", b, err)
	}
	var re *ReadError
	if _, err := Read(fifo, 10, true); !errors.As(err, &re) || re.Mode&fs.ModeNamedPipe == 0 {
		t.Errorf("Read(fifo) = %v, want a ReadError naming a FIFO", err)
	}
	if _, err := Read(big, 10, true); !errors.As(err, &re) || re.Size != 11 || re.Limit != 10 {
		t.Errorf("Read(11 bytes, limit 10) = %v, want a ReadError of its size", err)
	}
	if b, err := Read(link, 10, true); err != nil || string(b) != "ok" {
		t.Errorf("Read(link, follow) = %q, %v", b, err)
	}
	if _, err := Read(link, 10, false); !errors.Is(err, ErrSymlink) {
		t.Errorf("Read(link, no follow) = %v, want ErrSymlink", err)
	}
	if _, err := Read(filepath.Join(dir, "none"), 10, false); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read(missing) = %v, want fs.ErrNotExist", err)
	}
}
