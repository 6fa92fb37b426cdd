package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ReadError is why Read refused a file that exists: not a regular file
// (Mode holds its type), larger than the limit (Size), or grown past it
// while being read (Grew).
type ReadError struct {
	Path  string
	Mode  fs.FileMode
	Size  int64
	Limit int64
	Grew  bool
}

func (e *ReadError) Error() string {
	switch {
	case e.Mode.Type() != 0:
		return fmt.Sprintf("%s is not a regular file (%s)", e.Path, e.Mode.Type())
	case e.Grew:
		return fmt.Sprintf("%s grew past %d bytes while being read", e.Path, e.Limit)
	}
	return fmt.Sprintf("%s is %d bytes, more than %d", e.Path, e.Size, e.Limit)
}

// ErrSymlink is Read's refusal of a symbolic link when links are not
// followed.
var ErrSymlink = errors.New("is a symbolic link")

// Read reads a file that must be a regular one of at most limit bytes,
// so that no path makes the reader hang or exhaust memory: it opens
// without blocking (a FIFO with no writer returns at once), never reads
// past limit+1 bytes, and refuses what is not a regular file with a
// *ReadError. With follow false, a symbolic link at path is ErrSymlink
// (for state files of our own, which are never links). A missing file is
// an error satisfying errors.Is(err, fs.ErrNotExist).
func Read(path string, limit int64, follow bool) ([]byte, error) {
	flags := os.O_RDONLY | syscall.O_NONBLOCK | syscall.O_NOCTTY
	if !follow {
		flags |= syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(path, flags, 0)
	if !follow && errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s %w", path, ErrSymlink)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &ReadError{Path: path, Mode: fi.Mode(), Limit: limit}
	}
	if fi.Size() > limit {
		return nil, &ReadError{Path: path, Size: fi.Size(), Limit: limit}
	}
	// The size can grow between Stat and the read (someone appends): read
	// one byte past the limit to tell.
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, &ReadError{Path: path, Size: int64(len(data)), Limit: limit, Grew: true}
	}
	return data, nil
}
