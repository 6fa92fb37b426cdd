// Package mpssim is the simulated MPS control: what `mps-daemon --simulate`
// and the tests run where there is no GPU. It answers as the real
// nvidia-cuda-mps-control does, which pkg/mps's contract test checks against
// both. Only tests and the --simulate wiring of cmd/mps-daemon import it.
package mpssim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/units"
)

// Runner stands in for nvidia-cuda-mps-control where there is no GPU (CI,
// the simulated host). It answers every command the daemon uses, and those
// recorded in docs/gpu-runs/mps-probe.txt and mps-probe2.txt, with the same
// stdout, stderr and exit code as the real control (CUDA 13, driver 580):
//
//   - no daemon: exit 1, `Cannot find MPS control daemon process` on stderr;
//   - the failures the real one prints on stdout with exit 0: unknown
//     command, `A server PID is required`, `Server N not found`, ps's
//     `Server not found`, terminate_client's three lines;
//   - thread percentages echoed as %.1f, out-of-range ones not applied;
//   - pinned memory limits parsed the real way (a K suffix or anything else
//     but G means M, 0 or garbage clears the limit) and printed rounded down
//     to whole GiB (mps.DisplayMemLimit); the exact value is kept;
//   - lazy servers: AddClient starts one with the defaults of that moment;
//   - a client's connection (AddClient, Connect) logged in control.log as
//     the real daemon logs it: two NEW CLIENT lines, the first saying
//     whether the server had to be started (mps-probe-escape.txt), and in
//     server.log as the real server logs it: each connection, then the
//     client's context ACTIVE (probe-wedge-2026-11-29.txt);
//   - one command per invocation (the real client reads only the first
//     line; Run refuses a command holding a newline);
//   - quit (pid file and log fifo removed) versus Kill (`kill -9`: nothing
//     cleaned up, servers and clients gone with the daemon).
//
// docs/gpu-runs/mps-probe3.txt settled some guesses on the same machine (missing
// arguments, device ordinals, unknown PIDs). Still not measured, so modelled
// by guess and marked "not measured" in commands.go: terminate_client of
// an unknown client on a live server, shutdown_server of a live server.
// Client priorities answer as docs/gpu-runs/qos-probe.md recorded, and a
// running server gives the clients that connect after the default changed
// the new default, as docs/gpu-runs/qos-probe-running.md measured: the
// servers hold no priority of their own. Commands the probes never sent
// (start_server, ...) answer as unknown commands.
//
// The daemon's state lives in a JSON file in the pipe directory, so a new
// Runner in a new process finds the "running" daemon there, as the agent
// does after its own restart. A mutex per pipe directory and a flock on a
// lock file in it serialise every change to one daemon, since two
// processes may share one; the daemons of different pipe directories (one
// per GPU) answer side by side, as real ones do.
type Runner struct {
	log *slog.Logger
	// mu guards deviceName, cudaOrder, dirs and held.
	mu sync.Mutex
	// dirs holds each pipe directory's mutex, taken before its flock.
	dirs map[string]*sync.Mutex

	// deviceName is what get_device_client_list prints for device 0.
	deviceName string
	// firstServerPID numbers the simulated servers. It lies above Linux's
	// largest PID (4194304), so no simulated server PID is a real process.
	firstServerPID int
	// proc reads a client's command name and PID namespace for ps.
	proc func(pid int) (comm, namespace string)
	// cudaOrder is the host's GPUs in CUDA's default enumeration order
	// (fastest first), what a daemon started without CUDA_VISIBLE_DEVICES
	// numbers its devices by.
	cudaOrder []string
	// hold: connecting clients' contexts stay down until ContextUp; held
	// are those clients, with their server's log directory and PID.
	hold bool
	held map[int]heldClient
}

// heldClient is a connected client whose context is not up yet.
type heldClient struct {
	logDir string
	server int
}

// HoldContexts, while on, has clients that connect stop short of their
// context: their server.log gets no ACTIVE line until ContextUp, as a
// client between its connection and its context (13-20 ms on an H200's
// running server: pkg/mps/testdata/server-killed-with-context.log)
// or one that never asks for a context.
func (s *Runner) HoldContexts(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = on
}

// ContextUp brings up the context of a client held by HoldContexts: its
// server logs its second connection and the context ACTIVE.
func (s *Runner) ContextUp(pid int) error {
	s.mu.Lock()
	h, ok := s.held[pid]
	delete(s.held, pid)
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("simulated MPS client %d: no context held", pid)
	}
	s.contextUp(mps.Env{LogDir: h.logDir}, h.server, pid)
	return nil
}

func (s *Runner) contextUp(env mps.Env, server, pid int) {
	s.serverLog(env, server, fmt.Sprintf("Client {PID: %d, Context ID: 1} connected", pid))
	s.serverLog(env, server, fmt.Sprintf("Status of client {PID: %d, Context ID: 1} is ACTIVE", pid))
}

const (
	simStateFile = "sim-control.json"
	simLockFile  = "sim-control.lock"
	pidFile      = "nvidia-cuda-mps-control.pid"
	// lockWait bounds how long the simulator waits for another process's
	// lock when the caller gave no context (AddClient, RemoveClient, Kill).
	lockWait = 10 * time.Second
)

// New returns a simulated control. The device is named like the
// GPU the probes ran on; SetDeviceName changes it.
func New(log *slog.Logger) *Runner {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{log: log, dirs: map[string]*sync.Mutex{}, deviceName: "NVIDIA H200", firstServerPID: 4200001, proc: procInfo}
}

// dirLock is the mutex of the daemon in pipeDir.
func (s *Runner) dirLock(pipeDir string) *sync.Mutex {
	pipeDir = filepath.Clean(pipeDir)
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.dirs[pipeDir]
	if !ok {
		m = new(sync.Mutex)
		s.dirs[pipeDir] = m
	}
	return m
}

// SetDeviceName sets the device name daemons started afterwards report.
func (s *Runner) SetDeviceName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deviceName = name
}

// SetCUDAOrder sets the host's GPUs in the order CUDA enumerates them when
// CUDA_VISIBLE_DEVICES is unset. On a mixed host it differs from nvidia-smi's
// PCI order: CUDA puts the fastest GPU first.
func (s *Runner) SetCUDAOrder(uuids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cudaOrder = append([]string(nil), uuids...)
}

// Start implements Runner: it "daemonizes" by writing the state file and the
// files the real daemon leaves in the pipe and log directories.
func (s *Runner) Start(ctx context.Context, env mps.Env) error {
	if env.PipeDir == "" {
		return errors.New("simulated MPS control: no pipe directory")
	}
	for _, dir := range []string{env.PipeDir, env.LogDir} {
		if dir != "" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("simulated MPS control: %w", err)
			}
		}
	}
	s.mu.Lock()
	name := s.deviceName
	devices := append([]string(nil), s.cudaOrder...)
	s.mu.Unlock()
	if env.VisibleDevices != "" {
		devices = strings.Split(env.VisibleDevices, ",")
	}
	pid := os.Getpid()
	if mps.CheckPipeDir(env.PipeDir) != nil {
		// The real daemon cannot bind its socket and dies; `-d` has returned 0.
		s.controlLog(env, pid, "Failed to bind socket "+filepath.Join(env.PipeDir, "control_privileged"))
		return nil
	}
	return s.withState(ctx, env.PipeDir, func(st **simState) (bool, error) {
		if *st != nil {
			// The real `-d` prints this and exits 1 (mps-probe3.txt).
			return false, fmt.Errorf("simulated MPS control in %s: An instance of this daemon is already running", env.PipeDir)
		}
		// The sockets as the real daemon leaves them (mps-probe.txt,
		// probe-privileged): made anew, whatever was there (a socket left
		// by a daemon killed, a placeholder), control srw-rw-rw- and
		// control_privileged srwxr-xr-x. Nothing listens: the simulated
		// daemon answers through Run.
		for _, f := range []struct {
			name string
			mode uint32
		}{{"control", unix.S_IFSOCK | 0o666}, {mps.PrivilegedSocket, unix.S_IFSOCK | 0o755}, {"control_lock", unix.S_IFREG | 0o666}, {"log", unix.S_IFREG | 0o666}} {
			path := filepath.Join(env.PipeDir, f.name)
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return false, fmt.Errorf("simulated MPS control: %w", err)
			}
			if err := unix.Mknod(path, f.mode, 0); err != nil {
				return false, fmt.Errorf("simulated MPS control: making %s: %w", path, err)
			}
			if err := os.Chmod(path, fs.FileMode(f.mode&0o777)); err != nil {
				return false, fmt.Errorf("simulated MPS control: %w", err)
			}
		}
		var priv unix.Stat_t
		if err := unix.Lstat(filepath.Join(env.PipeDir, mps.PrivilegedSocket), &priv); err != nil {
			return false, fmt.Errorf("simulated MPS control: %w", err)
		}
		if err := os.WriteFile(filepath.Join(env.PipeDir, pidFile), []byte(strconv.Itoa(pid)), 0o666); err != nil {
			return false, fmt.Errorf("simulated MPS control: %w", err)
		}
		if env.LogDir != "" {
			if err := os.WriteFile(filepath.Join(env.LogDir, "server.log"), nil, 0o644); err != nil {
				return false, fmt.Errorf("simulated MPS control: %w", err)
			}
		}
		s.controlLog(env, pid, "Starting SIMULATED control daemon (yunion.io/x/mps-daemon/pkg/mps/mpssim) using socket "+
			filepath.Join(env.PipeDir, "control"))
		*st = &simState{
			PID:                     pid,
			VisibleDevices:          env.VisibleDevices,
			LogDir:                  env.LogDir,
			Devices:                 devices,
			DeviceName:              name,
			DefaultThreadPercentage: 100,
			DefaultMemoryLimits:     map[int]units.MiB{},
			NextServerPID:           s.firstServerPID,
			PrivilegedDev:           uint64(priv.Dev),
			PrivilegedIno:           priv.Ino,
		}
		s.log.Debug("simulated MPS control daemon started", "pipe_directory", env.PipeDir)
		return true, nil
	})
}

// Run implements Runner.
func (s *Runner) Run(ctx context.Context, env mps.Env, command string) (mps.Output, error) {
	if err := mps.CheckCommand(command); err != nil {
		return mps.Output{}, err
	}
	if err := ctx.Err(); err != nil {
		return mps.Output{}, fmt.Errorf("mps control %q: %w", command, err)
	}
	var out mps.Output
	// A client in a directory of links (a daemon's private directory,
	// mps.Guard) reaches the daemon its `control` link points to.
	pipeDir := daemonDir(env.PipeDir)
	err := s.withState(ctx, pipeDir, func(st **simState) (bool, error) {
		if *st == nil {
			out = mps.Output{Stderr: mps.MsgNoDaemon + "\n", ExitCode: 1}
			return false, nil
		}
		pid := (*st).PID
		// The daemon logs to its own log directory, whatever the
		// client's environment says.
		logTo := mps.Env{LogDir: cmp.Or((*st).LogDir, env.LogDir)}
		s.controlLog(logTo, pid, "Cmd:"+command)
		var dirty bool
		out.Stdout, dirty = simCommand(st, command, privileged(*st, env.PipeDir))
		if refused := strings.TrimSpace(out.Stdout); strings.HasPrefix(refused, mps.MsgQuitRefused) || strings.HasPrefix(refused, "Insufficient privileges") {
			s.controlLog(logTo, pid, refused) // the real daemon logs its refusals
		}
		if *st == nil {
			s.quitFiles(pipeDir)
			s.controlLog(logTo, pid, "Exit with status 0")
			s.log.Debug("simulated MPS control daemon quit", "pipe_directory", env.PipeDir)
		}
		return dirty, nil
	})
	return out, err
}

// AddClient connects a simulated client process: the first one starts the
// lazy server, which copies the defaults of that moment, as the real one does.
func (s *Runner) AddClient(pipeDir string, clientPID int) (serverPID int, err error) {
	comm, ns := s.proc(clientPID)
	ctx, cancel := context.WithTimeout(context.Background(), lockWait)
	defer cancel()
	err = s.withState(ctx, pipeDir, func(st **simState) (bool, error) {
		d := *st
		if d == nil {
			return false, fmt.Errorf("adding simulated MPS client %d in %s: %w", clientPID, pipeDir, mps.ErrNoDaemon)
		}
		serverPID = s.connect(d, clientPID, comm, ns).PID
		return true, nil
	})
	return serverPID, err
}

// connect connects a client to d's server as addClient does, writing to
// the daemon's control.log what the real one writes for a client's two
// connections (docs/gpu-runs/mps-probe-escape.txt): the first before the
// client has a context, starting the server if there is none.
func (s *Runner) connect(d *simState, pid int, comm, ns string) *simServer {
	env := mps.Env{LogDir: d.LogDir}
	started := len(d.Servers) == 0
	srv := addClient(d, pid, comm, ns)
	who := fmt.Sprintf("NEW CLIENT %d from user %d: ", pid, procUID(pid))
	s.controlLog(env, d.PID, "Accepting connection...")
	s.controlLog(env, d.PID, "User did not send valid credentials")
	s.controlLog(env, d.PID, "Accepting connection...")
	if started {
		s.controlLog(env, d.PID, who+"Server is not ready, push client to pending list")
		s.controlLog(env, srv.PID, fmt.Sprintf("Starting new server %d for user %d", srv.PID, procUID(pid)))
		s.controlLog(env, d.PID, fmt.Sprintf("NEW SERVER %d: Ready", srv.PID))
	} else {
		s.controlLog(env, d.PID, who+"Server already exists")
	}
	s.serverLog(env, srv.PID, fmt.Sprintf("Client {PID: %d, Context ID: 0} connected", pid))
	s.controlLog(env, d.PID, "Accepting connection...")
	s.controlLog(env, d.PID, who+"Server already exists")
	s.mu.Lock()
	hold := s.hold
	if hold {
		if s.held == nil {
			s.held = map[int]heldClient{}
		}
		s.held[pid] = heldClient{logDir: d.LogDir, server: srv.PID}
	}
	s.mu.Unlock()
	if !hold {
		s.contextUp(env, srv.PID, pid)
	}
	return srv
}

// addClient connects a client to d's server, starting it with the defaults
// of the moment when there is none; a client connected already stays as
// it is.
func addClient(d *simState, pid int, comm, ns string) *simServer {
	if len(d.Servers) == 0 {
		d.Servers = append(d.Servers, simServer{
			PID:              d.NextServerPID,
			ThreadPercentage: d.DefaultThreadPercentage,
			MemoryLimits:     copyLimits(d.DefaultMemoryLimits),
		})
		d.NextServerPID++
	}
	srv := &d.Servers[0]
	for _, c := range srv.Clients {
		if c.PID == pid {
			return srv
		}
	}
	srv.Clients = append(srv.Clients, simClient{PID: pid, Context: 1, Command: comm, Namespace: ns})
	return srv
}

// RemoveClient disconnects a simulated client; its server stays up, as the
// real one does after its last client exits.
func (s *Runner) RemoveClient(pipeDir string, clientPID int) error {
	ctx, cancel := context.WithTimeout(context.Background(), lockWait)
	defer cancel()
	return s.withState(ctx, pipeDir, func(st **simState) (bool, error) {
		if *st == nil {
			return false, fmt.Errorf("removing simulated MPS client %d in %s: %w", clientPID, pipeDir, mps.ErrNoDaemon)
		}
		if !removeClient(*st, clientPID) {
			return false, fmt.Errorf("removing simulated MPS client %d in %s: no such client", clientPID, pipeDir)
		}
		return true, nil
	})
}

// EnforcedLimits are the limits a simulated server enforces on device 0: the
// exact values set, not the rounded ones the getters print, and the client
// priority it gives a client that connects now: the control daemon's
// default of the moment, whenever the server started
// (docs/gpu-runs/qos-probe-running.md).
func (s *Runner) EnforcedLimits(pipeDir string, serverPID int) (mps.Limits, error) {
	return s.enforced(pipeDir, serverPID, func(*simState) (int, error) { return 0, nil })
}

// ExactDefaults are the defaults of the simulated daemon in pipeDir for
// device 0 as they are held: the exact memory limit set, which the getters
// print rounded (mps.DisplayMemLimit).
func (s *Runner) ExactDefaults(pipeDir string) (mps.Limits, error) {
	ctx, cancel := context.WithTimeout(context.Background(), lockWait)
	defer cancel()
	var l mps.Limits
	err := s.withState(ctx, pipeDir, func(st **simState) (bool, error) {
		if *st == nil {
			return false, fmt.Errorf("simulated MPS control in %s: %w", pipeDir, mps.ErrNoDaemon)
		}
		d := *st
		l = mps.Limits{MemoryLimit: d.DefaultMemoryLimits[0], ThreadPercentage: d.DefaultThreadPercentage, ClientPriority: d.DefaultClientPriority}
		return false, nil
	})
	return l, err
}

// EnforcedLimitsOn are the limits a simulated server enforces on the GPU
// with this UUID: the memory limit of the device ordinal that GPU has in the
// daemon (its place in Devices), the exact value set. This is what proves
// that caps set by ordinal land on the intended GPU.
func (s *Runner) EnforcedLimitsOn(pipeDir string, serverPID int, uuid string) (mps.Limits, error) {
	return s.enforced(pipeDir, serverPID, func(st *simState) (int, error) {
		i := slices.Index(st.Devices, uuid)
		if i < 0 {
			return 0, fmt.Errorf("simulated MPS server %d in %s does not see GPU %s (it sees %v)", serverPID, pipeDir, uuid, st.Devices)
		}
		return i, nil
	})
}

// enforced reads server serverPID's limits on the device ordinal picks.
func (s *Runner) enforced(pipeDir string, serverPID int, ordinal func(*simState) (int, error)) (mps.Limits, error) {
	ctx, cancel := context.WithTimeout(context.Background(), lockWait)
	defer cancel()
	var l mps.Limits
	err := s.withState(ctx, pipeDir, func(st **simState) (bool, error) {
		if *st == nil {
			return false, fmt.Errorf("simulated MPS server %d in %s: %w", serverPID, pipeDir, mps.ErrNoDaemon)
		}
		srv := server(*st, serverPID)
		if srv == nil {
			return false, fmt.Errorf("simulated MPS server %d in %s: %w", serverPID, pipeDir, mps.ErrServerNotFound)
		}
		i, err := ordinal(*st)
		if err != nil {
			return false, err
		}
		l = mps.Limits{MemoryLimit: srv.MemoryLimits[i], ThreadPercentage: srv.ThreadPercentage, ClientPriority: (*st).DefaultClientPriority}
		return false, nil
	})
	return l, err
}

// Fault models a client that hits a fatal GPU exception (an illegal
// address): its server reports FAULT and every OTHER client of that server
// dies at once, as measured on an H200 (docs/gpu-runs/mps-probe-fault.txt);
// the faulting client stays connected until RemoveClient, after which the
// server is ACTIVE again.
func (s *Runner) Fault(pipeDir string, clientPID int) error {
	ctx, cancel := context.WithTimeout(context.Background(), lockWait)
	defer cancel()
	return s.withState(ctx, pipeDir, func(st **simState) (bool, error) {
		if *st == nil {
			return false, fmt.Errorf("simulated MPS control in %s: not running", pipeDir)
		}
		for i := range (*st).Servers {
			srv := &(*st).Servers[i]
			if slices.ContainsFunc(srv.Clients, func(c simClient) bool { return c.PID == clientPID }) {
				srv.Fault = true
				srv.Clients = slices.DeleteFunc(srv.Clients, func(c simClient) bool { return c.PID != clientPID })
				return true, nil
			}
		}
		return false, fmt.Errorf("simulated MPS control in %s: no client %d", pipeDir, clientPID)
	})
}

// Kill is `kill -9` of the control daemon: it is gone with its servers and
// clients, and nothing is cleaned up (the pid file and sockets stay).
func (s *Runner) Kill(pipeDir string) {
	ctx, cancel := context.WithTimeout(context.Background(), lockWait)
	defer cancel()
	err := s.withState(ctx, pipeDir, func(st **simState) (bool, error) {
		*st = nil
		return true, nil
	})
	if err != nil {
		s.log.Warn("killing simulated MPS control daemon", "pipe_directory", pipeDir, "error", err)
	}
}

// quitFiles removes what the real daemon removes on quit: the pid file and
// the log fifo; the sockets and control_lock stay (mps-probe.txt).
func (s *Runner) quitFiles(pipeDir string) {
	for _, f := range []string{pidFile, "log"} {
		if err := os.Remove(filepath.Join(pipeDir, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("simulated MPS control: cleaning up", "error", err)
		}
	}
}

// controlLog appends a line to control.log in the real daemon's format.
func (s *Runner) controlLog(env mps.Env, pid int, msg string) {
	s.logLine(env, "control.log", "Control", pid, msg)
}

// serverLog appends a line to server.log in the real server's format
// (docs/gpu-runs/probe-wedge-2026-11-29.txt): a client's connections, and
// its context up.
func (s *Runner) serverLog(env mps.Env, pid int, msg string) {
	s.logLine(env, "server.log", "Server", pid, msg)
}

func (s *Runner) logLine(env mps.Env, file, who string, pid int, msg string) {
	if env.LogDir == "" {
		return
	}
	f, err := os.OpenFile(filepath.Join(env.LogDir, file), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		s.log.Debug("simulated MPS control: "+file, "error", err)
		return
	}
	defer f.Close()
	_, _ = fmt.Fprintf(f, "[%s %s %5d] %s\n", time.Now().Format("2006-01-02 15:04:05.000"), who, pid, msg)
}

// procUID is the real UID of a client process, from /proc; 0 for a
// simulated client without a process.
func procUID(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "Uid:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if uid, err := strconv.Atoi(f[0]); err == nil {
					return uid
				}
			}
		}
	}
	return 0
}

// procInfo is what ps shows of a client: its command name and PID namespace
// inode, from /proc; a simulated client without a process shows placeholders.
func procInfo(pid int) (comm, namespace string) {
	comm, namespace = "unknown", "0"
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
		comm = strings.TrimSpace(string(b))
	}
	if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil {
		if in, ok := strings.CutPrefix(l, "pid:["); ok {
			namespace = strings.TrimSuffix(in, "]")
		}
	}
	return comm, namespace
}

// daemonDir is the pipe directory of the control daemon a client in dir
// reaches: dir, or, for a directory of links to a pipe directory's files
// (mps.Guard's private directory), the directory its `control` links into.
func daemonDir(dir string) string {
	target, err := os.Readlink(filepath.Join(dir, "control"))
	if err != nil {
		return dir
	}
	if !filepath.IsAbs(target) {
		target = filepath.Join(dir, target)
	}
	return filepath.Dir(target)
}

// privileged reports whether a control client in dir reaches d's
// privileged socket, as the real client connects to control_privileged
// when it can (probe-privileged): dir's control_privileged is the socket
// d made, links followed (connect follows them), and the caller may
// connect to it (srwxr-xr-x: root, or its owner). A placeholder, a mask
// or another socket of that name is not.
func privileged(d *simState, dir string) bool {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, mps.PrivilegedSocket), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return false
	}
	if d.PrivilegedIno != 0 && (uint64(st.Dev) != d.PrivilegedDev || st.Ino != d.PrivilegedIno) {
		return false
	}
	euid := os.Geteuid()
	return euid == 0 || int(st.Uid) == euid
}
