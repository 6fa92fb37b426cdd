package mps

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"
)

// An MPS server writes server.log next to its control daemon's control.log.
// For each of a client's connections it logs the connection, and once the
// client's context on the device is up (measured on an H200, driver
// 580.159.04, docs/gpu-runs/probe-wedge-2026-11-29.txt):
//
//	[2026-11-29 08:11:33.213 Server  1489] Client {PID: 2359, Context ID: 0} connected
//	[2026-11-29 08:11:33.225 Server  1489] Client {PID: 2359, Context ID: 1} connected
//	[2026-11-29 08:11:33.225 Server  1489] Status of client {PID: 2359, Context ID: 1} is ACTIVE
//
// The ACTIVE line comes 13-20 ms after the client's first connection to a
// running server (72-73 ms for the first three clients of a server just
// started: the 12 clients of testdata/server-killed-with-context.log,
// the probe's record), and about 100 ms before the client's context is
// usable: from then on the client has finished talking to the control
// daemon and to the server, and can be killed without harm to either.
// Killed earlier, between connecting to the server and sending it its
// credentials, it leaves the server taking no new client and every
// control command that asks the server (get_server_status,
// get_client_list and quit were tried) hanging for good ("User did not
// send valid credentials" is the server's last line): with a command
// that asks the server sent right after each kill and again about 80 ms
// later, the same probe wedged it at the first kill (get_client_list), or
// at the 13th and the 17th (get_server_status, two runs); killing the
// server alone brought the control daemon's answers back but not new
// clients (the -recovery run). Killed once its context was up (the probe,
// 120 tries, a status asked after each) or right after its ACTIVE line
// (tests/gpu/escape.sh section 4 on the same host, 120 tries, later
// clients served), never.

// ServerLog is the file the MPS servers of a control daemon in env write
// their log to.
func ServerLog(env Env) string { return filepath.Join(env.LogDir, "server.log") }

// ActiveClient is one "Status of client ... is ACTIVE" line of server.log:
// a client whose context is up.
type ActiveClient struct {
	// PID is the client's, in the host's PID namespace (as NEW CLIENT
	// lines name it).
	PID int
	// Context is the server's number of the client's connection.
	Context int
	// At is the line's time.
	At time.Time
}

// ErrNotActiveClient: a server.log line that is not an ACTIVE line.
var ErrNotActiveClient = errors.New("not an ACTIVE client line")

const (
	activeMark   = "] Status of client {PID: "
	activeSuffix = "} is ACTIVE"
)

// ParseActiveClient reads one line of server.log (without its newline):
// an ACTIVE line, ErrNotActiveClient for any other, or an error naming
// what is wrong with an ACTIVE line that cannot be read. The time is read
// in loc (the server's local time; nil is time.Local).
func ParseActiveClient(line []byte, loc *time.Location) (ActiveClient, error) {
	i := bytes.Index(line, []byte(activeMark))
	if i < 0 || !bytes.HasSuffix(line, []byte(activeSuffix)) {
		return ActiveClient{}, ErrNotActiveClient
	}
	at, err := headerTime(line, i, " Server ", loc)
	switch {
	case errors.Is(err, errNoTime), errors.Is(err, errNotOwnHeader):
		return ActiveClient{}, ErrNotActiveClient
	case err != nil:
		return ActiveClient{}, fmt.Errorf("ACTIVE line %.80q: %w", line, err)
	}
	rest := line[i+len(activeMark) : len(line)-len(activeSuffix)]
	num, ctxPart, found := bytes.Cut(rest, []byte(", Context ID: "))
	pid, ok := parsePID(num)
	if !found || !ok {
		return ActiveClient{}, fmt.Errorf("ACTIVE line %.80q: PID %.20q", line, num)
	}
	n, err := strconv.Atoi(string(ctxPart))
	if err != nil || n < 0 || ctxPart[0] == '+' {
		return ActiveClient{}, fmt.Errorf("ACTIVE line %.80q: context %.20q", line, ctxPart)
	}
	return ActiveClient{PID: pid, Context: n, At: at}, nil
}
