package mps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
)

// Following control.log: the accounting learns of a client the moment it
// connects (ClientLog.Follow hands each NEW CLIENT line on), without asking
// anything while no client comes. The server.log beside it is followed
// the same way for the moment a client's context is up (its ACTIVE line,
// serverlog.go), before which a client is not killed. The directory is
// watched (fsnotify), not the file, so a file that does not exist yet, is
// replaced or comes back is seen; the file is read from the offset last
// read, in bounded chunks, lines longer than MaxLogLine skipped. What is
// in the file when following begins is history and is not read, to the
// end of the line it ends in (the accounting's first pass covers the
// clients already connected); a file that appears later, or replaces it,
// is read from its start.
//
// Rotation: a file truncated in place (copytruncate) is read again from
// its start. A file renamed away while the control daemon keeps writing to
// it (rename, then create) is followed through the descriptor held open,
// as long as the new file at the path stays empty; once the new one holds
// data (a control daemon started again writes there), or the old one is
// deleted, the new one is read from its start. A file moved out of the
// directory, or deleted while the daemon writes to it, is not seen until
// a new one appears: the accounting's poll stands in meanwhile.

// MaxLogLine bounds a line of control.log or server.log kept for parsing:
// the daemons' own lines are under 200 bytes, so a longer one is skipped
// (and counted).
const MaxLogLine = 4096

// logChunk is how much is read at a time: twice the longest line kept.
// Each followed file holds its own buffer for the daemon's life (two per
// GPU), and MPS writes a few lines per client, so a larger one buys
// nothing but resident memory.
const logChunk = 2 * MaxLogLine

// Waits before watching a log directory that does not exist is tried
// again, doubling up to the second.
const (
	logRetryFirst = time.Second
	logRetryMax   = 30 * time.Second
)

// ClientLogState is how a ClientLog fares, for /status.
type ClientLogState struct {
	Path string
	// Following: its directory is watched and the file, once it exists,
	// read as it grows. When false, Error says why.
	Following bool
	Error     string
	// Clients counts NEW CLIENT lines read, Active server.log's ACTIVE
	// lines; Malformed those that could not be read; LongLines lines
	// skipped for their length; Restarts the times a file was found
	// truncated or replaced and read again from its start; Trouble is the
	// last trouble met.
	Clients, Active, Malformed, LongLines, Restarts uint64
	Trouble                                         string
	// Foreign counts, by kind, the commands changing something that this
	// process did not send (while watched: Watch); LastForeign is the
	// last of them, with its time.
	Foreign     map[CommandKind]uint64
	LastForeign string
}

// Lines is what one read of control.log and server.log found: the clients
// that connected, those whose context is up and, while watched, the
// commands others sent.
type Lines struct {
	Clients []NewClient
	Active  []ActiveClient
	Foreign []Command
}

func (l Lines) empty() bool { return len(l.Clients)+len(l.Active)+len(l.Foreign) == 0 }

// ClientLog follows one control daemon's control.log, and its servers'
// server.log in the same directory. Its State may be read from any
// goroutine; Follow runs in one.
type ClientLog struct {
	path string
	// server is server.log's path.
	server string
	log    *slog.Logger
	loc    *time.Location

	mu     sync.Mutex
	st     ClientLogState
	warned map[string]bool // the kinds of trouble logged at warn once
	// changed is called when Following or Error changes (OnChange).
	changed func()
	// guard knows the commands this process sent (Watch); nil: commands
	// are not read. foreignWarn limits the warnings of a flood.
	guard       *Guard
	foreignWarn warnBudget
}

// Watch has the commands of control.log read too: those changing
// something that g says this process did not send are logged (a warning
// each, up to foreignWarnings a minute), counted in State and handed on
// (Lines.Foreign). Set it before Follow.
func (c *ClientLog) Watch(g *Guard) { c.guard = g }

// OnChange has f called, from Follow's goroutine, each time the log starts
// or stops being followed; set it before Follow.
func (c *ClientLog) OnChange(f func()) { c.changed = f }

// NewClientLog follows the control.log at path.
func NewClientLog(path string, log *slog.Logger) *ClientLog {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ClientLog{path: path, server: filepath.Join(filepath.Dir(path), "server.log"), log: log.With("control_log", path), loc: time.Local,
		st: ClientLogState{Path: path}, warned: map[string]bool{}}
}

// State is how it fares now.
func (c *ClientLog) State() ClientLogState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.st
	st.Foreign = maps.Clone(c.st.Foreign)
	return st
}

// Follow follows both files until ctx ends, handing what each read of them
// found (control.log's lines first) to send, in order. send may block (the
// files keep what is not read yet, so nothing is lost); an error from it
// ends Follow.
func (c *ClientLog) Follow(ctx context.Context, send func(context.Context, Lines) error) {
	dir := filepath.Dir(c.path)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		c.following(false, fmt.Sprintf("cannot watch %s: %v", dir, err))
		<-ctx.Done()
		return
	}
	defer w.Close()
	readers := []*logReader{
		{c: c, path: c.path, name: "control.log", parse: c.controlLine, initial: true},
		{c: c, path: c.server, name: "server.log", parse: c.serverLine, initial: true},
	}
	closeAll := func() {
		for _, r := range readers {
			r.close()
		}
	}
	defer closeAll()
	// wakeAll: every file to be read, and looked at for a truncation or
	// replacement.
	wakeAll := func() {
		for _, r := range readers {
			r.wake, r.check = true, true
		}
	}
	retry := time.NewTimer(0)
	defer retry.Stop()
	watched, wait := false, logRetryFirst
	// announce: watched anew, Following to be said once read.
	announce := false
	for {
		if !watched {
			if err := w.Add(dir); err != nil {
				c.following(false, fmt.Sprintf("cannot watch %s (tried again in %s): %v", dir, wait, err))
				retry.Reset(wait)
				wait = min(2*wait, logRetryMax)
			} else {
				watched, wait = true, logRetryFirst
				wakeAll()
				announce = true
			}
		}
		if watched && slices.ContainsFunc(readers, func(r *logReader) bool { return r.wake }) {
			var batch Lines
			for _, r := range readers { // control.log's lines first
				if r.wake {
					batch = r.read(ctx, batch)
				}
			}
			c.mu.Lock()
			c.st.Clients += uint64(len(batch.Clients))
			c.st.Active += uint64(len(batch.Active))
			c.mu.Unlock()
			if announce {
				// Said once the files are read up to where following
				// starts: a line written after this is handed on.
				announce = false
				c.following(true, "")
			}
			if !batch.empty() {
				if err := send(ctx, batch); err != nil {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			for more := true; more; {
				i := slices.IndexFunc(readers, func(r *logReader) bool {
					return strings.HasPrefix(filepath.Base(ev.Name), filepath.Base(r.path))
				})
				switch {
				case ev.Has(fsnotify.Remove|fsnotify.Rename) && gone(dir):
					// The directory went (with the file held open, its
					// watch would not say so): watched again once back.
					closeAll()
					_ = w.Remove(dir)
					watched = false
				case i < 0:
					// Another file of the log directory.
				case ev.Op == fsnotify.Write:
					readers[i].wake = true
				default:
					// Made, deleted, renamed: a new file may be there.
					r := readers[i]
					r.wake, r.check = true, true
					if ev.Name == r.path && ev.Has(fsnotify.Remove) {
						// Deleted: what is written to it now is seen by
						// no one, and the file held open would keep the
						// directory's own removal from being reported.
						r.drop = true
					}
				}
				select {
				case ev, more = <-w.Events:
				default:
					more = false
				}
			}
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			// An overflow loses events, never data: reading catches up.
			wakeAll()
			c.trouble("watch", "watching the log directory: "+err.Error())
		case <-retry.C:
		}
	}
}

func gone(dir string) bool {
	_, err := os.Stat(dir)
	return errors.Is(err, fs.ErrNotExist)
}

func (c *ClientLog) following(on bool, why string) {
	c.mu.Lock()
	changed := c.st.Following != on || c.st.Error != why
	c.st.Following, c.st.Error = on, why
	c.mu.Unlock()
	if changed && !on {
		c.log.Warn("control.log cannot be followed: new MPS clients are found by polling instead", "reason", why)
	}
	if changed && c.changed != nil {
		c.changed()
	}
}

// trouble records something wrong met while following: logged at warn
// the first time of its kind, at debug after that.
func (c *ClientLog) trouble(kind, msg string, count ...*uint64) {
	c.mu.Lock()
	for _, n := range count {
		*n++
	}
	first := !c.warned[kind]
	c.warned[kind] = true
	c.st.Trouble = msg
	c.mu.Unlock()
	level := slog.LevelDebug
	if first {
		level = slog.LevelWarn
	}
	c.log.Log(context.Background(), level, msg, "kind", kind)
}

// logReader reads one log file (control.log or server.log) from where it
// left off.
type logReader struct {
	c *ClientLog
	// path is the file's, name its name in messages; parse reads one of
	// its lines into out, or says what is wrong with a line it cannot.
	path, name string
	parse      func(line []byte, out *Lines) error
	f          *os.File
	// dev and ino name the file open, off is how far it was read.
	dev, ino uint64
	off      int64
	// initial: nothing was opened yet; a file found then is history, read
	// from its end.
	initial bool
	part    []byte // the unfinished last line
	skip    bool   // inside a line longer than MaxLogLine, or history's last
	buf     []byte
	// wake: something to read; check: look whether the file was
	// truncated or replaced too (a plain write of more lines needs not).
	// read clears both.
	wake, check bool
	// drop: a file at the path was deleted; the one read is closed, once
	// read to its end, if it was that one.
	drop bool
	// tail is the last bytes read, up to off: a file truncated and written
	// past off again between two reads holds other bytes there.
	tail []byte
}

// tailBytes is how much of what was read is kept to tell a file rewritten
// in place: more than a line's time and PID.
const tailBytes = 64

// trouble is ClientLog.trouble, each kind kept apart per file.
func (r *logReader) trouble(kind, msg string, count ...*uint64) {
	r.c.trouble(r.name+" "+kind, msg, count...)
}

func (r *logReader) close() {
	r.drop = false
	if r.f != nil {
		_ = r.f.Close()
		r.f = nil
	}
}

// read adds to out what was written since the last read. With check, or
// when nothing new was there, it looks whether the file was truncated or
// replaced too, and follows (the lines written past the offset read of a
// file truncated and written again between two reads are read as they
// come, the rest of it not).
func (r *logReader) read(ctx context.Context, out Lines) Lines {
	initial, check := r.initial, r.check
	r.initial, r.wake, r.check = false, false, false
	for range 3 { // reading, then a switch to a new file at most twice
		if r.f == nil && !r.open(initial) {
			return out
		}
		initial = false
		from := r.off
		out = r.drain(ctx, out)
		if !check && r.off > from && !r.drop {
			break // more lines: the file is the one being read
		}
		if r.drop {
			r.drop = false
			var st unix.Stat_t
			if err := unix.Fstat(int(r.f.Fd()), &st); err != nil || st.Nlink == 0 {
				r.close()
				break
			}
		}
		if ctx.Err() != nil || !r.switched() {
			break
		}
	}
	return out
}

// open opens the file, never blocking (a FIFO put there is refused); at
// the start of following (initial), from its end.
func (r *logReader) open(initial bool) bool {
	fd, err := unix.Open(r.path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false // not yet: the daemon makes it when it starts
	}
	if err != nil {
		r.trouble("open", fmt.Sprintf("opening %s: %v", r.name, err))
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		_ = unix.Close(fd)
		r.trouble("not a file", r.name+" is not a regular file: not read")
		return false
	}
	r.f, r.dev, r.ino, r.off, r.part, r.skip, r.tail = os.NewFile(uintptr(fd), r.path), uint64(st.Dev), st.Ino, 0, nil, false, nil
	if initial {
		r.off = st.Size
		// What ends the history is the tail to compare with. A history
		// ending inside a line (being written) is history to the end of
		// that line: what follows is not a line of its own.
		b := make([]byte, min(st.Size, tailBytes))
		if n, _ := r.f.ReadAt(b, st.Size-int64(len(b))); n == len(b) {
			r.tail = b
			r.skip = n > 0 && b[n-1] != '\n'
		}
	}
	return true
}

// drain reads the open file to its end, in chunks.
func (r *logReader) drain(ctx context.Context, out Lines) Lines {
	if r.buf == nil {
		r.buf = make([]byte, logChunk)
	}
	for ctx.Err() == nil {
		n, err := r.f.ReadAt(r.buf, r.off)
		r.off += int64(n)
		r.keepTail(r.buf[:n])
		out = r.lines(r.buf[:n], out)
		if n == 0 || errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			r.trouble("read", fmt.Sprintf("reading %s: %v", r.name, err))
			return out
		}
	}
	return out
}

// lines cuts data into lines, keeping the unfinished last one.
func (r *logReader) lines(data []byte, out Lines) Lines {
	c := r.c
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if r.skip {
			if i < 0 {
				return out
			}
			r.skip, data = false, data[i+1:]
			continue
		}
		if i < 0 {
			if len(r.part)+len(data) > MaxLogLine {
				r.part, r.skip = r.part[:0], true
				r.trouble("long line", fmt.Sprintf("%s: a line longer than %d bytes skipped", r.name, MaxLogLine), &c.st.LongLines)
				return out
			}
			r.part = append(r.part, data...)
			return out
		}
		line := data[:i]
		if len(r.part) > 0 {
			line = append(r.part, line...)
		}
		data = data[i+1:]
		r.part = r.part[:0]
		if len(line) > MaxLogLine {
			r.trouble("long line", fmt.Sprintf("%s: a line longer than %d bytes skipped", r.name, MaxLogLine), &c.st.LongLines)
			continue
		}
		if err := r.parse(line, &out); err != nil {
			r.trouble("malformed", r.name+": "+err.Error(), &c.st.Malformed)
		}
	}
	return out
}

// controlLine reads a line of control.log: a client connecting, or (while
// watched) a command; the error of a NEW CLIENT line that cannot be read.
func (c *ClientLog) controlLine(line []byte, out *Lines) error {
	nc, err := ParseNewClient(line, c.loc)
	switch {
	case err == nil:
		out.Clients = append(out.Clients, nc)
	case !errors.Is(err, ErrNotNewClient):
		return err
	case c.guard != nil:
		if cmd, ok := c.foreign(line); ok {
			out.Foreign = append(out.Foreign, cmd)
		}
	}
	return nil
}

// serverLine reads a line of server.log: a client whose context is up;
// the error of an ACTIVE line that cannot be read.
func (c *ClientLog) serverLine(line []byte, out *Lines) error {
	ac, err := ParseActiveClient(line, c.loc)
	switch {
	case err == nil:
		out.Active = append(out.Active, ac)
	case !errors.Is(err, ErrNotActiveClient):
		return err
	}
	return nil
}

// foreign reads a command line of control.log: a command changing
// something that this process did not send is logged and counted.
func (c *ClientLog) foreign(line []byte) (Command, bool) {
	cmd, err := ParseCommand(line, c.loc)
	if err != nil || cmd.Kind == "" || c.guard.Own(c.path, cmd.Line, cmd.At) {
		return cmd, false
	}
	c.mu.Lock()
	if c.st.Foreign == nil {
		c.st.Foreign = map[CommandKind]uint64{}
	}
	c.st.Foreign[cmd.Kind]++
	c.st.LastForeign = cmd.At.Format(controlTimeLayout) + " " + cmd.Line
	level, note := c.foreignWarn.take(time.Now())
	c.mu.Unlock()
	args := []any{"command", cmd.Line, "kind", string(cmd.Kind), "at", cmd.At}
	if note != "" {
		args = append(args, "note", note)
	}
	c.log.Log(context.Background(), level, "MPS control command not sent by this daemon", args...)
	return cmd, true
}

// foreignWarnings is how many foreign commands a minute are logged at
// warn, per control.log; the rest of a flood at debug (all counted).
const foreignWarnings = 20

// warnBudget gives the warnings of one minute.
type warnBudget struct {
	since time.Time
	n     int
}

// take is the level of the next message and a note for the last warning.
func (b *warnBudget) take(now time.Time) (slog.Level, string) {
	if now.Sub(b.since) >= time.Minute {
		b.since, b.n = now, 0
	}
	b.n++
	switch {
	case b.n < foreignWarnings:
		return slog.LevelWarn, ""
	case b.n == foreignWarnings:
		return slog.LevelWarn, fmt.Sprintf("%d this minute: the next ones this minute are logged at debug (all are counted in /status)", foreignWarnings)
	}
	return slog.LevelDebug, ""
}

func (r *logReader) keepTail(b []byte) {
	if len(b) >= tailBytes {
		r.tail = append(r.tail[:0], b[len(b)-tailBytes:]...)
		return
	}
	r.tail = append(r.tail, b...)
	if len(r.tail) > tailBytes {
		r.tail = append(r.tail[:0], r.tail[len(r.tail)-tailBytes:]...)
	}
}

// rewritten reports whether the bytes before off are no longer those read.
func (r *logReader) rewritten() bool {
	if len(r.tail) == 0 || r.off < int64(len(r.tail)) {
		return false
	}
	b := make([]byte, len(r.tail))
	n, _ := r.f.ReadAt(b, r.off-int64(len(b)))
	return n != len(b) || string(b) != string(r.tail)
}

// switched reports whether the file read was truncated or replaced, and
// so is to be read (again) from its start.
func (r *logReader) switched() bool {
	c := r.c
	var cur unix.Stat_t
	if err := unix.Fstat(int(r.f.Fd()), &cur); err != nil {
		r.close()
		return true
	}
	var st unix.Stat_t
	err := unix.Stat(r.path, &st)
	switch {
	case err == nil && (uint64(st.Dev) != r.dev || st.Ino != r.ino):
		if cur.Nlink > 0 && st.Size == 0 {
			return false // renamed away, still written: the new file is empty
		}
		r.close()
		r.trouble("replaced", r.name+" replaced: the new file is read from its start", &c.st.Restarts)
		return true
	case err != nil && !errors.Is(err, syscall.ENOENT):
		r.trouble("stat", fmt.Sprintf("looking at %s: %v", r.name, err))
	case cur.Size < r.off || r.rewritten():
		r.off, r.part, r.skip, r.tail = 0, r.part[:0], false, r.tail[:0]
		r.trouble("truncated", r.name+" truncated: read again from its start", &c.st.Restarts)
		return true
	}
	return false
}
