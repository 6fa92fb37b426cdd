package mps

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Guard stands between this daemon and its control daemons (issue 45):
//
//   - it keeps each control daemon's control_privileged out of the pipe
//     directory tenants reach, in the daemon's private directory
//     (Env.PrivilegedDir; privileged.go says why and how), and sends every
//     command through that directory;
//   - it remembers the commands that change something (Watched) this
//     process sent each control daemon, so that the follower of its
//     control.log (ClientLog.Watch) tells the commands of others apart.
//
// One Guard serves the whole process: every controller's runner is wrapped
// by Runner, so each control daemon is secured once whichever GPU's
// controller talks to it (the single layout's daemon has one per GPU).
// Safe for concurrent use.
//
// When the socket is moved: right after a start of ours (Runner's Start
// waits for the socket with inotify on the pipe directory, then moves it:
// the window in which the socket sits in the pipe directory runs from the
// control daemon's start to that rename, and is logged), and before every
// command, which finds a control daemon started by someone else, or
// started again, at the first command this daemon sends it (the health
// probe's, every mps_health_interval, at the latest).
type Guard struct {
	log *slog.Logger
	// rename and live are the file system's; tests replace them.
	rename func(old, new string) error
	live   func(path string) bool

	mu   sync.Mutex
	dirs map[string]*guarded     // by pipe directory
	sent map[string][]sentRecord // by control.log path
}

// guarded is what the Guard keeps of one control daemon.
type guarded struct {
	st PrivilegedState
	// warned is the last trouble logged at warn.
	warned string
	// failed and planted name sockets in the pipe directory (device,
	// inode): one the Guard could not move (tried again from retry on),
	// and one that is not the control daemon's (left alone).
	failed, planted fileID
	retry           time.Time
	// justMoved: the last secure moved the socket.
	justMoved bool
}

// retryAfter is how long a socket that could not be moved is left before
// the next try (every command tries otherwise).
const retryAfter = time.Minute

type fileID struct{ dev, ino uint64 }

func idOf(fi fs.FileInfo) fileID {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileID{uint64(st.Dev), st.Ino}
	}
	return fileID{}
}

// PrivilegedState is where a control daemon's privileged socket is.
type PrivilegedState struct {
	// Dir is the private directory; "" when none is configured.
	Dir string
	// Moved: the daemon's control_privileged is in Dir, and this daemon's
	// commands go through Dir.
	Moved bool
	// Reachable: the daemon's control_privileged is in its pipe directory,
	// where whoever reaches the directory reaches it; Reason says why it
	// was not moved.
	Reachable bool
	Reason    string
	// Window is, for the last move after a start of ours, how long the
	// socket can have been in the pipe directory: from the start to the
	// rename.
	Window time.Duration
}

// sentRecord is one command sent.
type sentRecord struct {
	line string
	at   time.Time
}

const (
	// sentTTL is how long a command sent is waited for in control.log: a
	// line that never came (the client found no daemon) is forgotten then.
	sentTTL = 2 * time.Minute
	// maxSent bounds what is remembered per control daemon.
	maxSent = 1024
	// startWatch bounds the wait for the socket after a start: a control
	// daemon that has not made it by then is secured at the first command.
	startWatch = 2 * time.Second
	// lineSlack is how much earlier than its command a line may be
	// stamped: the log's times have a millisecond, and are the host's clock.
	lineSlack = time.Second
)

// NewGuard returns a Guard logging to log.
func NewGuard(log *slog.Logger) *Guard {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Guard{log: log, rename: exchange, live: listening, dirs: map[string]*guarded{}, sent: map[string][]sentRecord{}}
}

// Runner is r with every command sent through the private directory of
// its control daemon, and every start followed by the move.
func (g *Guard) Runner(r Runner) Runner { return guardedRunner{g: g, r: r} }

type guardedRunner struct {
	g *Guard
	r Runner
}

// Run implements Runner.
func (x guardedRunner) Run(ctx context.Context, env Env, command string) (Output, error) {
	via := x.g.route(env)
	if env.LogDir != "" && Watched(command) {
		x.g.remember(ControlLog(env), command)
	}
	return x.r.Run(ctx, via, command)
}

// Start implements Runner: the control daemon is started, its privileged
// socket awaited and moved at once.
func (x guardedRunner) Start(ctx context.Context, env Env) error {
	if env.PrivilegedDir == "" {
		return x.r.Start(ctx, env)
	}
	begun := time.Now()
	w, werr := fsnotify.NewWatcher()
	if werr == nil {
		defer w.Close()
		if werr = w.Add(env.PipeDir); werr != nil {
			x.g.log.Debug("pipe directory not watched for the privileged socket; polled", "pipe_directory", env.PipeDir, "err", werr)
		}
	}
	if err := x.r.Start(ctx, env); err != nil {
		return err
	}
	wait, cancel := context.WithTimeout(ctx, startWatch)
	defer cancel()
	poll := time.NewTicker(time.Millisecond)
	defer poll.Stop()
	var events chan fsnotify.Event
	if werr == nil {
		events = w.Events
		poll.Reset(50 * time.Millisecond) // the events come first
	}
	for {
		if st, moved := x.g.secureNew(env); moved {
			st.Window = time.Since(begun)
			x.g.setWindow(env, st.Window)
			x.g.log.Info("MPS control daemon's privileged socket moved out of its pipe directory",
				"pipe_directory", env.PipeDir, "private_directory", env.PrivilegedDir,
				"window", st.Window.Round(time.Microsecond).String())
			return nil
		} else if st.Reachable {
			return nil // said by secure
		}
		select {
		case <-wait.Done():
			x.g.log.Debug("no privileged socket yet after the start; moved at the first command", "pipe_directory", env.PipeDir)
			return nil
		case <-events:
		case <-poll.C:
		}
	}
}

// route secures env's control daemon and says where a command goes: its
// private directory once the socket is there, its pipe directory
// otherwise.
func (g *Guard) route(env Env) Env {
	if env.PrivilegedDir == "" {
		return env
	}
	g.mu.Lock()
	st := g.secure(env)
	g.mu.Unlock()
	if st.Moved {
		env.PipeDir = env.PrivilegedDir
	}
	return env
}

// secureNew is route for a start: whether the socket was moved just now.
func (g *Guard) secureNew(env Env) (PrivilegedState, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.secure(env)
	return st, g.dir(env.PipeDir).justMoved
}

// Privileged is where env's control daemon's privileged socket was at the
// last command.
func (g *Guard) Privileged(env Env) PrivilegedState {
	if env.PrivilegedDir == "" {
		return PrivilegedState{Reachable: true, Reason: "no private directory configured"}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dir(env.PipeDir).st
}

func (g *Guard) setWindow(env Env, w time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dir(env.PipeDir).st.Window = w
}

func (g *Guard) dir(pipeDir string) *guarded {
	d, ok := g.dirs[pipeDir]
	if !ok {
		d = &guarded{}
		g.dirs[pipeDir] = d
	}
	return d
}

// secure moves a control daemon's new privileged socket out of env's pipe
// directory, and returns where it is. g.mu is held.
func (g *Guard) secure(env Env) PrivilegedState {
	d := g.dir(env.PipeDir)
	d.justMoved = false
	d.st.Dir = env.PrivilegedDir
	pipeSock := filepath.Join(env.PipeDir, PrivilegedSocket)
	privSock := filepath.Join(env.PrivilegedDir, PrivilegedSocket)
	pfi, err := os.Lstat(pipeSock)
	if err == nil && idOf(pfi) == d.failed && time.Now().Before(d.retry) {
		return d.st // could not be moved a moment ago
	}
	if err != nil || !isSocket(pfi) || placeholder(pfi) || idOf(pfi) == d.planted {
		// Nothing new in the pipe directory: the socket is where it was.
		qfi, qerr := os.Lstat(privSock)
		d.st.Moved = qerr == nil && isSocket(qfi) && !placeholder(qfi)
		d.st.Reachable, d.st.Reason = false, ""
		return d.st
	}
	planted, err := g.move(env, pipeSock, privSock, pfi)
	if planted {
		d.planted = idOf(pfi)
		d.st.Moved, d.st.Reachable, d.st.Reason = true, false, ""
		return d.st
	}
	if err != nil {
		d.failed, d.retry = idOf(pfi), time.Now().Add(retryAfter)
		d.st.Moved, d.st.Reachable, d.st.Reason = false, true, err.Error()
		if d.warned != d.st.Reason {
			d.warned = d.st.Reason
			g.log.Warn("MPS control daemon's privileged socket stays in its pipe directory: whoever reaches the directory can quit the control daemon and change its defaults",
				"pipe_directory", env.PipeDir, "reason", d.st.Reason)
		}
		return d.st
	}
	if d.warned != "" {
		g.log.Info("MPS control daemon's privileged socket is out of its pipe directory again", "pipe_directory", env.PipeDir, "private_directory", env.PrivilegedDir)
	}
	d.warned, d.failed, d.justMoved = "", fileID{}, true
	d.st.Moved, d.st.Reachable, d.st.Reason = true, false, ""
	return d.st
}

// move renames the socket at pipeSock to privSock, leaving a placeholder;
// a socket that is not the daemon's (its own, moved before, still answers)
// is left where it is (planted), and said once.
func (g *Guard) move(env Env, pipeSock, privSock string, pfi fs.FileInfo) (planted bool, err error) {
	if n := len(privSock); n > maxSocketPath {
		return false, fmt.Errorf("the private directory's socket path %s is %d bytes, unix sockets allow %d (shorten cuda_mps_pipe_directory)", privSock, n, maxSocketPath)
	}
	if err := privateDir(env.PrivilegedDir); err != nil {
		return false, err
	}
	if err := links(env.PrivilegedDir, env.PipeDir); err != nil {
		return false, err
	}
	if qfi, err := os.Lstat(privSock); err == nil && isSocket(qfi) && !placeholder(qfi) && g.live(privSock) {
		// The control daemon's own socket, moved before, answers: the one
		// in the pipe directory was made by someone else. A control
		// daemon runs once per pipe directory (control_lock).
		g.log.Warn("a control_privileged socket in the pipe directory is not its control daemon's (the daemon's own, in the private directory, answers): left where it is",
			"pipe_directory", env.PipeDir, "private_directory", env.PrivilegedDir, "inode", idOf(pfi).ino)
		return true, nil
	}
	if err := makePlaceholder(privSock); err != nil {
		return false, err
	}
	if err := g.rename(pipeSock, privSock); err != nil {
		if errors.Is(err, syscall.EXDEV) {
			return false, fmt.Errorf("%s and %s are on different file systems (is the pipe root a mount point?): %w", env.PipeDir, env.PrivilegedDir, err)
		}
		return false, fmt.Errorf("moving %s into %s: %w", pipeSock, env.PrivilegedDir, err)
	}
	return false, nil
}

// remember notes a command sent to the control daemon logging to log.
func (g *Guard) remember(log, command string) {
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	l := prune(g.sent[log], now)
	if len(l) >= maxSent {
		l = l[1:]
	}
	g.sent[log] = append(l, sentRecord{line: strings.TrimSpace(command), at: now})
}

// Own reports whether the command line logged at time at in the
// control.log at log is one this process sent (and forgets it: each
// command sent stands for one line).
func (g *Guard) Own(log, line string, at time.Time) bool {
	line = strings.TrimSpace(line)
	g.mu.Lock()
	defer g.mu.Unlock()
	l := prune(g.sent[log], time.Now())
	for i, s := range l {
		if s.line == line && !s.at.After(at.Add(lineSlack)) {
			g.sent[log] = append(l[:i:i], l[i+1:]...)
			return true
		}
	}
	g.sent[log] = l
	return false
}

// prune drops what was sent longer than sentTTL ago.
func prune(l []sentRecord, now time.Time) []sentRecord {
	i := 0
	for i < len(l) && now.Sub(l[i].at) > sentTTL {
		i++
	}
	return l[i:]
}
