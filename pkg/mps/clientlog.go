package mps

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"
)

// A control daemon writes one line to control.log in its log directory
// (CUDA_MPS_LOG_DIRECTORY) for every connection a CUDA client makes,
// before the client has a context, let alone memory. Measured on an H200,
// driver 580.159.04 (docs/gpu-runs/mps-probe-escape.txt):
//
//	[2026-11-27 23:41:37.724 Control   557] NEW CLIENT 690 from user 0: Server already exists
//	[2026-11-22 01:19:23.858 Control  1286] NEW CLIENT 1295 from user 0: Server is not ready, push client to pending list
//
//   - the first line is written 1-3 ms after the client process starts
//     (inside its cuInit), and a follower reads it within a millisecond of
//     the time it carries; a client connects twice (the second line 10-20
//     ms later). Its first allocation comes 100-130 ms after the first line
//     when the server runs, 400 ms when the client starts the server;
//   - the PID is the client's in the control daemon's PID namespace (the
//     host's): a client in its own PID namespace with its own /proc
//     (unshare --pid --fork --mount-proc), PID 1 there, was logged under
//     its host PID, as NVML lists it;
//   - the time is the daemon's local time, to the millisecond.
//
// Every control command is logged too ("NEW UI", "Cmd:...", "UI closed"),
// the daemon's own included; those lines are not NEW CLIENT lines.

// ControlLog is the file a control daemon in env writes its log to.
func ControlLog(env Env) string { return filepath.Join(env.LogDir, "control.log") }

// NewClient is one NEW CLIENT line: a client process connecting.
type NewClient struct {
	// PID is the client's, in the host's PID namespace.
	PID int
	// UID is the user the daemon says it connects as.
	UID int
	// At is the line's time.
	At time.Time
}

// ErrNotNewClient: a line that is not a NEW CLIENT line (most are not).
var ErrNotNewClient = errors.New("not a NEW CLIENT line")

// maxPID is Linux's PID_MAX_LIMIT: no PID is larger.
const maxPID = 1 << 22

const (
	controlTimeLayout = "2006-01-02 15:04:05.000"
	newClientMark     = "] NEW CLIENT "
)

// ParseNewClient reads one line of control.log (without its newline): a
// NEW CLIENT line, ErrNotNewClient for any other line, or an error naming
// what is wrong with a NEW CLIENT line that cannot be read. The time is
// read in loc (the daemon's local time; nil is time.Local).
func ParseNewClient(line []byte, loc *time.Location) (NewClient, error) {
	i := bytes.Index(line, []byte(newClientMark))
	if i < 0 {
		return NewClient{}, ErrNotNewClient
	}
	// The mark must end the daemon's own header, "[<time> Control <pid>]":
	// text a client sends the control daemon is logged after a header of
	// its own ("Cmd:...", "Unknown command ..."), never there.
	at, err := headerTime(line, i, " Control ", loc)
	switch {
	case errors.Is(err, errNotOwnHeader):
		return NewClient{}, ErrNotNewClient
	case err != nil:
		return NewClient{}, fmt.Errorf("NEW CLIENT line %.80q: %w", line, err)
	}
	rest := line[i+len(newClientMark):]
	num, rest, _ := bytes.Cut(rest, []byte{' '})
	pid, ok := parsePID(num)
	if !ok {
		return NewClient{}, fmt.Errorf("NEW CLIENT line %.80q: PID %.20q", line, num)
	}
	nc := NewClient{PID: pid, UID: -1, At: at}
	if u, ok := bytes.CutPrefix(rest, []byte("from user ")); ok {
		num, _, _ := bytes.Cut(u, []byte{':'})
		if uid, err := strconv.Atoi(string(num)); err == nil && uid >= 0 {
			nc.UID = uid
		}
	}
	return nc, nil
}

// parsePID reads a PID as the daemons log it: decimal, no sign, within
// Linux's PID range.
func parsePID(num []byte) (int, bool) {
	pid, err := strconv.Atoi(string(num))
	return pid, err == nil && pid > 0 && pid <= maxPID && num[0] != '+'
}

// Why headerTime read no time: the line has none where a header's is, or
// what stands before the mark is not the daemon's own header.
var (
	errNoTime       = errors.New("no time")
	errNotOwnHeader = errors.New("not the daemon's own header")
)

// headerTime reads the time of a line of an MPS daemon's log whose mark
// starts at i, right after the daemon's own header "[<time> <who> <pid>]"
// (who " Control " or " Server "): errNoTime or errNotOwnHeader when it is
// not there, an error naming the time when that cannot be read (in loc;
// nil is time.Local).
func headerTime(line []byte, i int, who string, loc *time.Location) (time.Time, error) {
	if len(line) < 1+len(controlTimeLayout) || line[0] != '[' || i < 1+len(controlTimeLayout) {
		return time.Time{}, errNoTime
	}
	if !ownHeader(line[1+len(controlTimeLayout):i], who) {
		return time.Time{}, errNotOwnHeader
	}
	if loc == nil {
		loc = time.Local
	}
	at, err := time.ParseInLocation(controlTimeLayout, string(line[1:1+len(controlTimeLayout)]), loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("its time: %w", err)
	}
	return at, nil
}

// ownHeader reports whether h is what follows the time in an MPS daemon's
// own header: who, spaces, its PID.
func ownHeader(h []byte, who string) bool {
	rest, ok := bytes.CutPrefix(h, []byte(who))
	if !ok {
		return false
	}
	rest = bytes.TrimLeft(rest, " ")
	if len(rest) == 0 {
		return false
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
