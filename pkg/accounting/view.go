package accounting

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"yunion.io/x/mps-daemon/pkg/clientreport"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/units"
)

// Whether a client has its device's view (docs/containers.md, "What
// software in a slice sees"): the view's library, preloaded in every
// dynamically linked glibc process of a container of ours, is listed in
// the process's /proc/<pid>/maps once loaded. A client without it is told
// the whole GPU's memory by CUDA and NVML. It is reported, never
// terminated: the view changes only what software is told, the caps hold
// regardless.
//
// The map is read once per process (by PID and start time: the library is
// loaded before main, so a client's answer does not change), as a stream,
// at most maxMapsRead bytes, through the process's held /proc directory,
// never following a link.
const (
	maxMapsRead = 64 << 20
	mapsBufSize = 64 << 10
)

// WithoutView is a client reported for not having its device's view; the
// embedded clientreport.WithoutView is what /status shows.
type WithoutView struct {
	clientreport.WithoutView
	// StartTicks identifies the process (see Client.StartTicks).
	StartTicks uint64
}

func (w WithoutView) gpuPID() (gpu.UUID, int) { return w.GPU, w.PID }

// procKey is one process: a PID and its start time.
type procKey struct {
	pid   int
	start uint64
}

// SetViewLibrary says which library gives a container's processes their
// device's view (its file name, view.LibraryFile), or "" when the
// containers get none: then no client is checked, and none is reported.
func (a *Accountant) SetViewLibrary(file string) {
	if file != a.viewLibrary {
		a.views = nil
	}
	a.viewLibrary = file
}

// checkViews marks, in u, each billed client whose map lists no mapping
// of the view's library (or that could not be read), counts them per
// device, and lists them in u.WithoutView, sorted by GPU then PID.
func (a *Accountant) checkViews(u *Usage) {
	if a.viewLibrary == "" {
		return
	}
	seen := map[procKey]bool{}
	for name, d := range u.PerDevice {
		d.WithoutView = 0
		for i := range d.Clients {
			c := &d.Clients[i]
			key := procKey{c.PID, c.StartTicks}
			has, known := a.views[key]
			var err error
			if !known {
				has, err = a.mapper.HasMapping(c.PID, c.StartTicks, a.viewLibrary)
				if err == nil {
					if a.views == nil {
						a.views = map[procKey]bool{}
					}
					a.views[key] = has
				}
			}
			seen[key] = true
			if err != nil && errors.Is(err, ErrExited) {
				continue
			}
			c.WithoutView = !has
			if err == nil && has {
				continue
			}
			reason := "no " + a.viewLibrary + " in its memory map: CUDA and NVML tell it the whole GPU's memory, not its device's cap " +
				"(a static or musl program, a process outside containers, or one where the library could not load); reported, never terminated"
			if err != nil {
				c.WithoutView = false
				reason = fmt.Sprintf("its memory map could not be read (%v): whether it sees its device's cap is not known", err)
			} else {
				d.WithoutView++
			}
			u.WithoutView = append(u.WithoutView, WithoutView{WithoutView: clientreport.WithoutView{
				PID: c.PID, GPU: d.GPU, UsedBytes: units.Bytes(c.UsedBytes), Device: name, Source: c.Source, Reason: reason,
			}, StartTicks: c.StartTicks})
		}
		u.PerDevice[name] = d
	}
	for k := range a.views {
		if !seen[k] {
			delete(a.views, k) // gone: its PID may come back as another process
		}
	}
	byGPUThenPID(u.WithoutView)
}

// HasMapping reports whether process pid, started at start (its stat's
// start time; another start time is another process, ErrExited), maps a
// file whose name is file (its path's last element, "(deleted)" or not).
func (m *Mapper) HasMapping(pid int, start uint64, file string) (bool, error) {
	p, err := m.open(pid)
	if err != nil {
		return false, err
	}
	defer p.Close()
	st, err := p.stat()
	if err != nil {
		return false, err
	}
	if st.StartTicks != start {
		return false, fmt.Errorf("PID %d: %w (its PID is another process's now)", pid, ErrExited)
	}
	f, err := p.openFile("maps")
	if err != nil {
		return false, err
	}
	defer f.Close()
	found, err := scanMaps(f, file)
	if err != nil {
		return false, p.gone(p.readErr("maps", err))
	}
	return found, p.stillThere()
}

// errMapsTooLong: more than maxMapsRead bytes of map.
var errMapsTooLong = errors.New("memory map larger than the accounting reads")

// scanMaps reads a /proc/<pid>/maps stream and reports whether a line's
// path ends in "/"+file (or "/"+file+" (deleted)"). Lines longer than the
// buffer are skipped (a path is at most 4096 bytes; the buffer holds any
// line the kernel writes for one).
func scanMaps(r io.Reader, file string) (bool, error) {
	br := bufio.NewReaderSize(io.LimitReader(r, maxMapsRead+1), mapsBufSize)
	name := []byte("/" + file)
	deleted := []byte("/" + file + " (deleted)")
	var read int
	for {
		line, err := br.ReadSlice('\n')
		read += len(line)
		if read > maxMapsRead {
			return false, fmt.Errorf("%w (over %d MiB)", errMapsTooLong, maxMapsRead>>20)
		}
		long := errors.Is(err, bufio.ErrBufferFull)
		if err != nil && err != io.EOF && !long {
			return false, err
		}
		if !long {
			line = bytes.TrimSuffix(line, []byte{'\n'})
			if bytes.HasSuffix(line, name) || bytes.HasSuffix(line, deleted) {
				return true, nil
			}
		}
		for long {
			line, err = br.ReadSlice('\n')
			read += len(line)
			if read > maxMapsRead {
				return false, fmt.Errorf("%w (over %d MiB)", errMapsTooLong, maxMapsRead>>20)
			}
			long = errors.Is(err, bufio.ErrBufferFull)
			if err != nil && err != io.EOF && !long {
				return false, err
			}
		}
		if err == io.EOF {
			return false, nil
		}
	}
}
