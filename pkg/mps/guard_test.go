package mps_test

import (
	"bytes"
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"yunion.io/x/mps-daemon/internal/testsupport/process"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
)

const guardGPU = "GPU-0757c6d5-b93a-6cd1-29ca-e10c633c5de6"

// layouts are the two pipe layouts' environments under root: the single
// layout's daemon in the pipe root, a per-GPU one in <root>/<uuid>, each
// with its private directory beside the root.
func layouts(root string) map[string]mps.Env {
	pipe, logs := filepath.Join(root, "pipe"), filepath.Join(root, "log")
	priv := mps.PrivilegedRoot(pipe)
	return map[string]mps.Env{
		"single":  {PipeDir: pipe, LogDir: logs, VisibleDevices: guardGPU, Single: true, PrivilegedDir: priv},
		"per-GPU": {PipeDir: filepath.Join(pipe, guardGPU), LogDir: filepath.Join(logs, guardGPU), VisibleDevices: guardGPU, PrivilegedDir: filepath.Join(priv, guardGPU)},
	}
}

// shortDir is a directory whose sockets' paths fit 107 bytes (a test's
// own temporary directory may not).
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "g")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// logBuffer collects a logger's lines, safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// guarded is a controller of env through a new Guard (a new process of
// the daemon) over sim.
func guarded(t *testing.T, sim mps.Runner, env mps.Env, logs *logBuffer) (*mps.Controller, *mps.Guard) {
	t.Helper()
	g := mps.NewGuard(logs.logger())
	return mps.NewController(g.Runner(sim), env, 10*time.Second, nil), g
}

// raw sends one command as a process given dir as CUDA_MPS_PIPE_DIRECTORY
// would: a pod holding the pipe root sends its commands from there.
func raw(t *testing.T, r mps.Runner, dir, command string) string {
	t.Helper()
	out, err := r.Run(t.Context(), mps.Env{PipeDir: dir}, command)
	if err != nil || out.ExitCode != 0 {
		t.Fatalf("%s through %s: %+v, %v", command, dir, out, err)
	}
	return strings.TrimSpace(out.Stdout)
}

// mode is the type and permissions of path (not followed).
func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

// checkMoved: the daemon's control_privileged is in env's private
// directory (0700), a dead placeholder socket of mode 0000 under its old
// name in the pipe directory, links to what the control client needs.
func checkMoved(t *testing.T, env mps.Env) {
	t.Helper()
	if m := mode(t, filepath.Join(env.PipeDir, mps.PrivilegedSocket)); m.Type() != fs.ModeSocket || m.Perm() != 0 {
		t.Errorf("pipe directory's %s: %v, want the placeholder (a socket, mode 0000)", mps.PrivilegedSocket, m)
	}
	if m := mode(t, filepath.Join(env.PrivilegedDir, mps.PrivilegedSocket)); m.Type() != fs.ModeSocket || m.Perm() != 0o755 {
		t.Errorf("private directory's %s: %v, want the daemon's socket (srwxr-xr-x)", mps.PrivilegedSocket, m)
	}
	if m := mode(t, env.PrivilegedDir); !m.IsDir() || m.Perm() != 0o700 {
		t.Errorf("private directory %s: %v, want drwx------", env.PrivilegedDir, m)
	}
	for _, name := range []string{"control", "control_lock", "nvidia-cuda-mps-control.pid", "log"} {
		if got, err := os.Readlink(filepath.Join(env.PrivilegedDir, name)); err != nil || got != filepath.Join(env.PipeDir, name) {
			t.Errorf("private directory's %s -> %q, %v; want a link to the pipe directory's", name, got, err)
		}
	}
}

// checkRefused: through the pipe directory, quit and set_default_* are
// refused as the real control refuses them, the daemon runs on and its
// defaults stay; a question is answered.
func checkRefused(t *testing.T, r mps.Runner, c *mps.Controller, env mps.Env) {
	t.Helper()
	before, err := c.Defaults(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if out := raw(t, r, env.PipeDir, "quit"); out != mps.MsgQuitRefused {
		t.Errorf("quit through the pipe directory answered %q, want %q", out, mps.MsgQuitRefused)
	}
	for _, cmd := range []string{"set_default_active_thread_percentage 37", "set_default_device_pinned_mem_limit 0 3G", "set_default_client_priority 1"} {
		if out := raw(t, r, env.PipeDir, cmd); !strings.HasPrefix(out, "Insufficient privileges for UID ") {
			t.Errorf("%s through the pipe directory answered %q, want the refusal", cmd, out)
		}
	}
	if up, err := c.Running(t.Context()); err != nil || !up {
		t.Fatalf("the control daemon after a refused quit: running %v, %v", up, err)
	}
	if after, err := c.Defaults(t.Context()); err != nil || after != before {
		t.Errorf("defaults %+v after the refused commands, %v; want %+v", after, err, before)
	}
	if out := raw(t, r, env.PipeDir, "get_default_active_thread_percentage"); out == "" {
		t.Error("a question through the pipe directory went unanswered")
	}
}

// In both layouts the Guard moves the privileged socket out of the pipe
// directory as the control daemon starts: through the pipe directory quit
// and set_default_* are refused and a client is served; the daemon's own
// commands, through the private directory, set defaults and quit.
func TestGuardMovesThePrivilegedSocketOutOfThePipeDirectory(t *testing.T) {
	for name, env := range layouts(shortDir(t)) {
		t.Run(name, func(t *testing.T) {
			sim := mpssim.New(nil)
			var logs logBuffer
			c, g := guarded(t, sim, env, &logs)
			if adopted, err := c.Ensure(t.Context()); err != nil || adopted {
				t.Fatalf("Ensure = %v, %v", adopted, err)
			}
			checkMoved(t, env)
			if st := g.Privileged(env); !st.Moved || st.Reachable || st.Dir != env.PrivilegedDir || st.Window <= 0 {
				t.Errorf("Privileged = %+v, want moved, out of reach, with its window", st)
			}
			if !strings.Contains(logs.String(), "privileged socket moved out of its pipe directory") {
				t.Errorf("the move was not logged:\n%s", logs.String())
			}
			if err := c.SetDefaults(t.Context(), mps.Limits{MemoryLimit: 20480, ThreadPercentage: 25}); err != nil {
				t.Fatalf("the daemon's own defaults: %v", err)
			}
			checkRefused(t, sim, c, env)
			// A client of the pipe directory is served, at the daemon's limit.
			v, err := sim.Connect(4242, []string{"CUDA_MPS_PIPE_DIRECTORY=" + env.PipeDir})
			if err != nil || len(v.MemoryLimits) != 1 || v.MemoryLimits[0] != 20480 {
				t.Fatalf("a client through the pipe directory: %+v, %v; want served at 20480 MiB", v, err)
			}
			// A server's limits through the pipe directory: answered, as
			// measured (the daemon notices them: TestClientLogTellsForeignCommands).
			if out := raw(t, sim, env.PipeDir, "set_active_thread_percentage "+strconv.Itoa(v.ServerPID)+" 12"); out != "12.0" {
				t.Errorf("set_active_thread_percentage through the pipe directory: %q, want 12.0", out)
			}
			if err := c.Quit(t.Context()); err != nil {
				t.Fatalf("the daemon's own quit: %v", err)
			}
		})
	}
}

// After this daemon's restart (a new Guard) the socket is found moved:
// the control daemon is adopted and the daemon's commands are privileged.
// A control daemon started again (killed, then started by another
// program: a new socket in the pipe directory) gets its socket moved at
// the next command.
func TestGuardAdoptsAndMovesAgain(t *testing.T) {
	for name, env := range layouts(shortDir(t)) {
		t.Run(name, func(t *testing.T) {
			sim := mpssim.New(nil)
			var logs logBuffer
			c, _ := guarded(t, sim, env, &logs)
			if _, err := c.Ensure(t.Context()); err != nil {
				t.Fatal(err)
			}
			c2, g2 := guarded(t, sim, env, &logs)
			if adopted, err := c2.Ensure(t.Context()); err != nil || !adopted {
				t.Fatalf("after a restart of ours: Ensure = %v, %v; want the daemon adopted", adopted, err)
			}
			if st := g2.Privileged(env); !st.Moved || st.Reachable {
				t.Errorf("after a restart of ours: %+v, want the socket found moved", st)
			}
			if err := c2.SetDefaults(t.Context(), mps.Limits{MemoryLimit: 1024, ThreadPercentage: 50}); err != nil {
				t.Fatalf("after a restart of ours: %v", err)
			}
			// kill -9, then another program starts a control daemon: its
			// socket is in the pipe directory, the moved one dead.
			sim.Kill(env.PipeDir)
			if err := sim.Start(t.Context(), mps.Env{PipeDir: env.PipeDir, LogDir: env.LogDir, VisibleDevices: guardGPU}); err != nil {
				t.Fatal(err)
			}
			if m := mode(t, filepath.Join(env.PipeDir, mps.PrivilegedSocket)); m.Perm() != 0o755 {
				t.Fatalf("the new daemon's socket: %v", m)
			}
			if adopted, err := c2.Ensure(t.Context()); err != nil || !adopted {
				t.Fatalf("Ensure = %v, %v; want the new daemon adopted", adopted, err)
			}
			checkMoved(t, env)
			if err := c2.SetDefaults(t.Context(), mps.Limits{MemoryLimit: 2048, ThreadPercentage: 25}); err != nil {
				t.Fatalf("the new daemon's defaults: %v", err)
			}
			checkRefused(t, sim, c2, env)
		})
	}
}

// A socket someone else made under the privileged socket's name, while the
// daemon's own (moved) answers, is not the daemon's: it is left where it
// is, said once, and the daemon's commands still go to its own.
func TestGuardLeavesAPlantedSocketAlone(t *testing.T) {
	env := layouts(shortDir(t))["single"]
	sim := mpssim.New(nil)
	var logs logBuffer
	c, g := guarded(t, sim, env, &logs)
	g.SetLive(func(string) bool { return true }) // the daemon's own answers
	if _, err := c.Ensure(t.Context()); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(env.PipeDir, mps.PrivilegedSocket)
	if err := os.Remove(planted); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(planted, unix.S_IFSOCK|0o755, 0); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := c.SetDefaults(t.Context(), mps.Limits{MemoryLimit: 2048, ThreadPercentage: 25}); err != nil {
			t.Fatalf("the daemon's defaults beside a planted socket: %v", err)
		}
	}
	var planted2, own unix.Stat_t
	if err := unix.Lstat(planted, &planted2); err != nil || planted2.Mode&0o777 != 0o755 {
		t.Fatalf("the planted socket was moved or replaced: %v %o", err, planted2.Mode)
	}
	if err := unix.Lstat(filepath.Join(env.PrivilegedDir, mps.PrivilegedSocket), &own); err != nil || own.Ino == planted2.Ino {
		t.Fatalf("the private directory's socket is the planted one: %v", err)
	}
	if n := strings.Count(logs.String(), "is not its control daemon's"); n != 1 {
		t.Errorf("%d warnings of the planted socket, want 1:\n%s", n, logs.String())
	}
	if st := g.Privileged(env); !st.Moved || st.Reachable {
		t.Errorf("Privileged = %+v, want the daemon's own socket out of reach", st)
	}
}

// A socket that cannot be moved (another file system; anything else) is
// said in one warning naming why and in the state, MPS runs on through the
// pipe directory, and the next control daemon is tried again.
func TestGuardReportsASocketItCannotMove(t *testing.T) {
	for _, c := range []struct {
		name, why string
		err       error
	}{
		{"EXDEV", "different file systems", syscall.EXDEV},
		{"EPERM", "operation not permitted", syscall.EPERM},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := layouts(shortDir(t))["single"]
			sim := mpssim.New(nil)
			var logs logBuffer
			ctl, g := guarded(t, sim, env, &logs)
			g.SetRename(func(old, new string) error { return &os.LinkError{Op: "renameat2", Old: old, New: new, Err: c.err} })
			if _, err := ctl.Ensure(t.Context()); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if err := ctl.SetDefaults(t.Context(), mps.Limits{MemoryLimit: 2048, ThreadPercentage: 25}); err != nil {
					t.Fatalf("MPS through the pipe directory: %v", err)
				}
			}
			st := g.Privileged(env)
			if st.Moved || !st.Reachable || !strings.Contains(st.Reason, c.why) {
				t.Errorf("Privileged = %+v, want reachable, the reason naming %q", st, c.why)
			}
			if n := strings.Count(logs.String(), "privileged socket stays in its pipe directory"); n != 1 {
				t.Errorf("%d warnings, want 1:\n%s", n, logs.String())
			}
			if m := mode(t, filepath.Join(env.PipeDir, mps.PrivilegedSocket)); m.Perm() != 0o755 {
				t.Errorf("the socket left in the pipe directory: %v", m)
			}
		})
	}
}

// TestGuardOnASecondFileSystem: the pipe root a mount point of its own (a
// tmpfs, in a user and mount namespace of the test's): the rename fails
// with EXDEV, said as such, and MPS runs on through the pipe directory.
func TestGuardOnASecondFileSystem(t *testing.T) {
	if os.Getenv("MPS_GUARD_TMPFS_CHILD") == "1" {
		guardOnTmpfs(t)
		return
	}
	process.InNamespace(t, "TestGuardOnASecondFileSystem", "MPS_GUARD_TMPFS_CHILD=1", "MPS_GUARD_TMPFS_DIR="+shortDir(t))
}

func guardOnTmpfs(t *testing.T) {
	root := os.Getenv("MPS_GUARD_TMPFS_DIR")
	env := layouts(root)["single"]
	if err := os.MkdirAll(env.PipeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("none", env.PipeDir, "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatalf("mounting a tmpfs on the pipe root: %v", err)
	}
	defer unix.Unmount(env.PipeDir, unix.MNT_DETACH)
	sim := mpssim.New(nil)
	var logs logBuffer
	c, g := guarded(t, sim, env, &logs)
	if _, err := c.Ensure(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := c.SetDefaults(t.Context(), mps.Limits{MemoryLimit: 2048, ThreadPercentage: 25}); err != nil {
		t.Fatalf("MPS through the pipe directory: %v", err)
	}
	if st := g.Privileged(env); st.Moved || !st.Reachable || !strings.Contains(st.Reason, "different file systems") || !strings.Contains(st.Reason, "cross-device") {
		t.Errorf("Privileged = %+v, want reachable, for EXDEV", st)
	}
	if err := c.Quit(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// The Guard's memory of the commands sent: each stands for one line of
// control.log, logged after it was sent; questions are not remembered.
func TestGuardKnowsItsOwnCommands(t *testing.T) {
	env := layouts(shortDir(t))["single"]
	sim := mpssim.New(nil)
	var logs logBuffer
	c, g := guarded(t, sim, env, &logs)
	before := time.Now()
	if _, err := c.Ensure(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := c.SetDefaults(t.Context(), mps.Limits{MemoryLimit: 2048, ThreadPercentage: 25}); err != nil {
		t.Fatal(err)
	}
	log := mps.ControlLog(env)
	now := time.Now()
	if g.Own(log, "set_default_active_thread_percentage 25", before.Add(-2*time.Second)) {
		t.Error("a line stamped before the command was sent taken for it")
	}
	if !g.Own(log, "set_default_active_thread_percentage 25", now) {
		t.Error("the daemon's own set_default_active_thread_percentage not known")
	}
	if g.Own(log, "set_default_active_thread_percentage 25", now) {
		t.Error("one command sent, two lines taken for it")
	}
	if g.Own(log, "set_default_active_thread_percentage 99", now) || g.Own(log, "get_server_list", now) {
		t.Error("a command never sent taken for the daemon's")
	}
	if g.Own(filepath.Join(t.TempDir(), "control.log"), "set_default_device_pinned_mem_limit 0 2048M", now) {
		t.Error("another control daemon's line taken for this one's")
	}
	if !g.Own(log, " set_default_device_pinned_mem_limit 0 2048M ", now) {
		t.Error("the daemon's own set_default_device_pinned_mem_limit not known")
	}
}

// A control daemon whose socket appears only after `-d` returned (a real
// daemon binds after forking) has it moved as it appears: the start waits
// for it, and says how long the socket can have been in the pipe directory.
func TestGuardMovesASocketMadeAfterTheStart(t *testing.T) {
	env := layouts(shortDir(t))["single"]
	sim := mpssim.New(nil)
	var logs logBuffer
	g := mps.NewGuard(logs.logger())
	late := &lateStart{Runner: sim, started: make(chan error, 1)}
	c := mps.NewController(g.Runner(late), env, 10*time.Second, nil)
	if _, err := c.Ensure(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-late.started; err != nil {
		t.Fatal(err)
	}
	checkMoved(t, env)
	if st := g.Privileged(env); !st.Moved || st.Window <= 0 {
		t.Errorf("Privileged = %+v, want moved with its window", st)
	}
	if !strings.Contains(logs.String(), "window=") {
		t.Errorf("the window is not logged:\n%s", logs.String())
	}
}

// lateStart makes the daemon's files only after Start returned, as a
// daemon that binds its sockets after `-d` forked it.
type lateStart struct {
	*mpssim.Runner
	started chan error
}

func (l *lateStart) Start(ctx context.Context, env mps.Env) error {
	go func() { l.started <- l.Runner.Start(context.WithoutCancel(ctx), env) }()
	return nil
}

// followCommands follows env's control.log, watched by g, collecting the
// foreign commands handed on.
func followCommands(t *testing.T, env mps.Env, g *mps.Guard, logs *logBuffer) (*mps.ClientLog, func() []mps.Command) {
	t.Helper()
	cl := mps.NewClientLog(mps.ControlLog(env), logs.logger())
	cl.Watch(g)
	var mu sync.Mutex
	var got []mps.Command
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		cl.Follow(ctx, func(_ context.Context, l mps.Lines) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, l.Foreign...)
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "control.log followed", func() bool { return cl.State().Following })
	return cl, func() []mps.Command {
		mu.Lock()
		defer mu.Unlock()
		return append([]mps.Command(nil), got...)
	}
}

// waitFor waits until cond holds, failing after a long bound rather than
// hang (nothing here is timed).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// The follower of control.log tells the commands the daemon sent from
// others': each command changing something that another process sent
// through the pipe directory is handed on, warned about and counted by
// kind; the daemon's own, and questions, are not, even the same command
// line sent again by another.
func TestClientLogTellsForeignCommands(t *testing.T) {
	env := layouts(shortDir(t))["single"]
	sim := mpssim.New(nil)
	var logs logBuffer
	c, g := guarded(t, sim, env, &logs)
	if _, err := c.Ensure(t.Context()); err != nil {
		t.Fatal(err)
	}
	cl, foreign := followCommands(t, env, g, &logs)
	own := mps.Limits{MemoryLimit: 2048, ThreadPercentage: 25}
	if err := c.SetDefaults(t.Context(), own); err != nil {
		t.Fatal(err)
	}
	srv, err := sim.AddClient(env.PipeDir, 5001)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetServerLimits(t.Context(), srv, own); err != nil {
		t.Fatal(err)
	}
	s := strconv.Itoa(srv)
	for _, cmd := range []string{"get_server_list", "set_active_thread_percentage " + s + " 12", "quit", "get_active_thread_percentage " + s,
		"terminate_client " + s + " 5001", "set_default_active_thread_percentage 25"} {
		raw(t, sim, env.PipeDir, cmd)
	}
	// The daemon's own again, after the others'.
	if err := c.SetServerLimits(t.Context(), srv, own); err != nil {
		t.Fatal(err)
	}
	raw(t, sim, env.PipeDir, "shutdown_server "+s)
	want := []string{"set_active_thread_percentage " + s + " 12", "quit", "terminate_client " + s + " 5001", "set_default_active_thread_percentage 25", "shutdown_server " + s}
	waitFor(t, "the last foreign command handed on", func() bool { l := foreign(); return len(l) > 0 && l[len(l)-1].Name == "shutdown_server" })
	got := foreign()
	var lines []string
	for _, c := range got {
		lines = append(lines, c.Line)
	}
	if strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Fatalf("foreign commands %q, want %q", lines, want)
	}
	if !got[0].ChangesLimits() || got[0].Server != srv || got[0].Kind != mps.KindServer || got[1].Kind != mps.KindDaemon {
		t.Errorf("foreign commands read as %+v", got)
	}
	st := cl.State()
	if st.Foreign[mps.KindDaemon] != 2 || st.Foreign[mps.KindServer] != 3 || !strings.HasSuffix(st.LastForeign, "shutdown_server "+s) {
		t.Errorf("state %+v, want 2 daemon and 3 server commands counted, the last named", st)
	}
	if n := strings.Count(logs.String(), "MPS control command not sent by this daemon"); n != len(want) {
		t.Errorf("%d warnings, want one per foreign command (%d):\n%s", n, len(want), logs.String())
	}
}
