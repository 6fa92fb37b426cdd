package accounting

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"yunion.io/x/mps-daemon/pkg/vdev"
)

// A process's initial environment is read as a stream: only the four
// variables the accounting needs are kept, each value at most maxEnvValue
// bytes, so memory stays bounded however large the environment is, and its
// size alone never makes a process an escape (issue 23: a batch client
// with an environment over 1 MiB was terminated under enforce).
//
// What bounds the reading instead: execve takes at most 6 MiB of arguments
// and environment together (3/4 of _STK_LIM, whatever the stack limit, since
// Linux 4.13), so every environment a process can be started with is read
// whole. Only a process that moves its environment region with
// prctl(PR_SET_MM_ENV_START/END), which needs CAP_SYS_RESOURCE, can make
// /proc/<pid>/environ longer; past maxEnvironRead it counts as unreadable.
const (
	maxEnvValue     = 4 << 10
	maxEnvironRead  = 64 << 20
	environBufBytes = 64 << 10
)

// envVars are the values each variable the accounting reads had, in order
// of appearance: at most two distinct ones (a second, different value is
// all a verdict needs), each cut at maxEnvValue bytes and then marked with
// its full length, so two long values that differ only in length still
// differ.
type envVars struct {
	device, thread, priority, limit []string
}

// slot is where values of name go; nil for a name not read.
func (v *envVars) slot(name []byte) *[]string {
	switch string(name) {
	case vdev.EnvVar:
		return &v.device
	case vdev.EnvThreadPercentage:
		return &v.thread
	case vdev.EnvClientPriority:
		return &v.priority
	case vdev.EnvMemoryLimit:
		return &v.limit
	}
	return nil
}

func addValue(s *[]string, value string) {
	if len(*s) >= 2 || (len(*s) == 1 && (*s)[0] == value) {
		return
	}
	*s = append(*s, value)
}

// errEnvironTooLong: more than maxEnvironRead bytes (see above).
var errEnvironTooLong = errors.New("environment larger than execve can make")

// scanEnviron reads NUL-separated NAME=value entries from r and keeps the
// values of the variables envVars holds. Entries that are not NAME=value
// are skipped, as the kernel's own getenv would never match them.
func scanEnviron(r io.Reader) (envVars, error) {
	var v envVars
	br := bufio.NewReaderSize(io.LimitReader(r, maxEnvironRead+1), environBufBytes)
	var read int64
	for {
		chunk, err := br.ReadSlice(0)
		read += int64(len(chunk))
		if read > maxEnvironRead {
			return envVars{}, fmt.Errorf("%w (over %d MiB)", errEnvironTooLong, maxEnvironRead>>20)
		}
		if len(chunk) == 0 && err == io.EOF {
			return v, nil
		}
		complete := err == nil || err == io.EOF
		if err != nil && err != io.EOF && !errors.Is(err, bufio.ErrBufferFull) {
			return envVars{}, err
		}
		entry := bytes.TrimSuffix(chunk, []byte{0})
		name, value, ok := bytes.Cut(entry, []byte{'='})
		var s *[]string
		if ok {
			s = v.slot(name)
		}
		var keep []byte
		if s != nil {
			keep = append(keep, value[:min(len(value), maxEnvValue)]...)
		}
		n := int64(len(value))
		for !complete {
			// The rest of an entry longer than the buffer: counted, not kept.
			chunk, err = br.ReadSlice(0)
			read += int64(len(chunk))
			if read > maxEnvironRead {
				return envVars{}, fmt.Errorf("%w (over %d MiB)", errEnvironTooLong, maxEnvironRead>>20)
			}
			rest := bytes.TrimSuffix(chunk, []byte{0})
			if s != nil && len(keep) < maxEnvValue {
				keep = append(keep, rest[:min(len(rest), maxEnvValue-len(keep))]...)
			}
			n += int64(len(rest))
			complete = err == nil || err == io.EOF
			if err != nil && err != io.EOF && !errors.Is(err, bufio.ErrBufferFull) {
				return envVars{}, err
			}
		}
		if s != nil {
			val := string(keep)
			if n > maxEnvValue {
				val = fmt.Sprintf("%s... (%d bytes)", val, n)
			}
			addValue(s, val)
		}
		if err == io.EOF {
			return v, nil
		}
	}
}

// deviceOf is the device the environment names (see ParseEnviron).
func (v envVars) deviceOf() (string, error) {
	switch {
	case len(v.device) > 1:
		return "", fmt.Errorf("%s is set twice (%q and %q): %w", vdev.EnvVar, envDisplay(v.device[0]), envDisplay(v.device[1]), vdev.ErrBadName)
	case len(v.device) == 0 || v.device[0] == "":
		return "", ErrNoDevice
	}
	if _, _, err := vdev.ParseName(v.device[0]); err != nil {
		return "", fmt.Errorf("%s: %w", vdev.EnvVar, err)
	}
	return v.device[0], nil
}
