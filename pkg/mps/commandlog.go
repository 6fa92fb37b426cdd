package mps

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A control daemon logs every command it is sent in control.log, whoever
// sent it and through whichever socket, before it answers (measured on an
// H200, driver 580.159.04, docs/gpu-runs/probe-privileged-2026-11-29.txt):
//
//	[2026-11-29 04:43:49.847 Control   527] NEW UI
//	[2026-11-29 04:43:49.847 Control   527] Cmd:set_active_thread_percentage 873 12
//	[2026-11-29 04:43:49.847 Control   527] 12.0
//	[2026-11-29 04:43:49.847 Control   527] UI closed
//
// The line after "Cmd:" is the command line as sent. The log does not say
// who sent it: the Guard remembers what this process sent, and the
// follower of control.log (ClientLog) tells the others apart.

// CommandKind says what a command the daemon watches for changes.
type CommandKind string

const (
	// KindDaemon: the control daemon's own settings (set_default_*) and
	// its life (quit, start_server). Refused unless sent through the
	// privileged socket (control_privileged), which the Guard keeps out of
	// the pipe directory tenants reach.
	KindDaemon CommandKind = "daemon"
	// KindServer: a running server's limits and clients
	// (set_active_thread_percentage, set_device_pinned_mem_limit,
	// terminate_client, shutdown_server). Answered through the pipe
	// directory's `control` to a client of the server's user: root in a
	// Cloudpods pod, whose servers run as root, can send them (measured).
	KindServer CommandKind = "server"
)

// CommandKinds are the kinds in a fixed order (metrics' labels).
func CommandKinds() []CommandKind { return []CommandKind{KindDaemon, KindServer} }

// watched are the commands that change something, by kind: the ones this
// daemon notices when another program sends them. Questions (get_*, ps)
// and unknown commands change nothing and are not watched.
var watched = map[string]CommandKind{
	"quit":                                 KindDaemon,
	"start_server":                         KindDaemon,
	"set_default_active_thread_percentage": KindDaemon,
	"set_default_device_pinned_mem_limit":  KindDaemon,
	"set_default_client_priority":          KindDaemon,
	"set_active_thread_percentage":         KindServer,
	"set_device_pinned_mem_limit":          KindServer,
	"terminate_client":                     KindServer,
	"shutdown_server":                      KindServer,
}

// Command is one command a control daemon logged.
type Command struct {
	// At is the line's time (the daemon's local time, to the millisecond).
	At time.Time
	// Line is the command line as sent; Name its first word.
	Line, Name string
	// Kind is what it changes; "" for a command that changes nothing.
	Kind CommandKind
	// Server is the MPS server PID it names (KindServer commands), 0 for
	// none or one that does not parse.
	Server int
}

// ChangesLimits reports whether the command sets a running server's
// limits (thread percentage or pinned memory): what the daemon puts back.
func (c Command) ChangesLimits() bool {
	return c.Server > 0 && (c.Name == "set_active_thread_percentage" || c.Name == "set_device_pinned_mem_limit")
}

// ErrNotCommand: a line that is not a command line (most are not).
var ErrNotCommand = errors.New("not a Cmd line")

const commandMark = "] Cmd:"

// MaxCommandLine bounds the command text kept: what a control client can
// send is one line, and nothing the daemon sends is near it.
const MaxCommandLine = 256

// ParseCommand reads one line of control.log (without its newline): a
// command line, or ErrNotCommand. The mark must end the daemon's own
// header, "[<time> Control <pid>]", as for NEW CLIENT lines: a command's
// text (which a client chooses) never starts a line. The time is read in
// loc (nil: time.Local).
func ParseCommand(line []byte, loc *time.Location) (Command, error) {
	i := bytes.Index(line, []byte(commandMark))
	if i < 0 {
		return Command{}, ErrNotCommand
	}
	at, err := headerTime(line, i, " Control ", loc)
	switch {
	case errors.Is(err, errNoTime), errors.Is(err, errNotOwnHeader):
		return Command{}, ErrNotCommand
	case err != nil:
		return Command{}, fmt.Errorf("Cmd line %.80q: %w", line, err)
	}
	text := line[i+len(commandMark):]
	if len(text) > MaxCommandLine {
		text = text[:MaxCommandLine]
	}
	c := Command{At: at, Line: strings.ToValidUTF8(string(text), "?")}
	f := strings.Fields(c.Line)
	if len(f) == 0 {
		return c, nil
	}
	c.Name = f[0]
	c.Kind = watched[c.Name]
	if c.Kind == KindServer && len(f) > 1 {
		if pid, err := strconv.ParseInt(f[1], 10, 32); err == nil && pid > 0 && f[1][0] != '+' {
			c.Server = int(pid)
		}
	}
	return c, nil
}

// Watched reports whether a command line sent to a control daemon is one
// the daemon watches for (it changes something).
func Watched(command string) bool {
	name, _, _ := strings.Cut(strings.TrimSpace(command), " ")
	_, ok := watched[name]
	return ok
}
