package config

import (
	"errors"
	"fmt"
	"io/fs"

	"yunion.io/x/mps-daemon/pkg/atomicfile"
)

// Size limits of the files read here. Real files are a few kB: host.conf
// holds a few dozen keys, the device YAML an entry per device of the host.
// The limits keep a mistaken path (a log file, a disk image) from filling
// the daemon's memory; they are far above anything an operator writes.
const (
	// MaxConfigBytes bounds host.conf and the device YAML.
	MaxConfigBytes = 1 << 20
	// MaxTokenBytes bounds mps_inventory_token_file: a token, a newline.
	MaxTokenBytes = 64 << 10
)

// ReadFile reads a configuration file that an operator names, so that no
// path can make the reader hang or exhaust memory:
//   - it opens without blocking (O_NONBLOCK: opening a FIFO with no writer
//     returns at once instead of waiting for one) and accepts only a regular
//     file, after following symlinks: a FIFO, a socket, a device such as
//     /dev/zero or a directory is an *Error naming the file;
//   - it reads at most limit bytes; a longer file is an *Error naming the
//     file and the limit.
//
// A missing file is an error that satisfies errors.Is(err, fs.ErrNotExist).
func ReadFile(path string, limit int64) ([]byte, error) {
	data, err := atomicfile.Read(path, limit, true)
	var re *atomicfile.ReadError
	switch {
	case !errors.As(err, &re):
		return data, err
	case re.Mode.Type() != 0:
		return nil, &Error{File: path, Msg: fmt.Sprintf("is %s, not a regular file", describeMode(re.Mode))}
	case re.Grew:
		return nil, &Error{File: path, Msg: fmt.Sprintf("grew past the %s a configuration file may have while being read", sizeName(limit))}
	}
	return nil, &Error{File: path, Msg: fmt.Sprintf("is %d bytes, more than the %s a configuration file may have", re.Size, sizeName(limit))}
}

// describeMode names a file type that is not a regular file.
func describeMode(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO (named pipe)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "a special file (" + m.Type().String() + ")"
}

func sizeName(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
