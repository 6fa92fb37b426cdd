package mpssim

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/units"
)

// replayStep is one line of testdata/probe-replay.txt: a directive (@...) or
// a command with the answer the real control gave.
type replayStep struct {
	line      int
	directive []string
	command   string
	want      mps.Output
}

// readReplay parses the probe transcript format (see the file's header).
func readReplay(t *testing.T, path string) []replayStep {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var steps []replayStep
	var cur *replayStep
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "### "):
			steps = append(steps, replayStep{line: n, command: strings.TrimPrefix(l, "### ")})
			cur, section = &steps[len(steps)-1], ""
		case strings.HasPrefix(l, "@"):
			steps = append(steps, replayStep{line: n, directive: strings.Fields(l[1:])})
			cur = nil
		case cur != nil && strings.HasPrefix(l, "rc="):
			rc, err := strconv.Atoi(strings.TrimPrefix(l, "rc="))
			if err != nil {
				t.Fatalf("%s:%d: %v", path, n, err)
			}
			cur.want.ExitCode = rc
		case cur != nil && (l == "--stdout" || l == "--stderr"):
			section = l
		case cur != nil && section != "" && strings.HasSuffix(l, "$"):
			text := strings.TrimSuffix(l, "$") + "\n"
			if section == "--stdout" {
				cur.want.Stdout += text
			} else {
				cur.want.Stderr += text
			}
		case l == "" || strings.HasPrefix(l, "# "):
			cur = nil
		default:
			t.Fatalf("%s:%d: unexpected line %q", path, n, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return steps
}

// TestSimReplaysProbes runs every command of the real probes against the
// simulator and wants the same stdout, stderr and exit code, byte for byte.
func TestSimReplaysProbes(t *testing.T) {
	steps := readReplay(t, "testdata/probe-replay.txt")
	s := New(nil)
	s.proc = func(int) (string, string) { return "python3", "4026531836" }
	var env mps.Env
	for _, st := range steps {
		if st.directive != nil {
			arg, err := strconv.Atoi(st.directive[1])
			if err != nil {
				t.Fatalf("line %d: %v", st.line, err)
			}
			switch st.directive[0] {
			case "start":
				dir := t.TempDir()
				env = mps.Env{PipeDir: filepath.Join(dir, "p"), LogDir: filepath.Join(dir, "l"),
					VisibleDevices: "GPU-0757c6d5-b93a-6cd1-29ca-e10c633c5de6"}
				s.firstServerPID = arg
				if err := s.Start(t.Context(), env); err != nil {
					t.Fatalf("line %d: %v", st.line, err)
				}
			case "add-client":
				if _, err := s.AddClient(env.PipeDir, arg); err != nil {
					t.Fatalf("line %d: %v", st.line, err)
				}
			default:
				t.Fatalf("line %d: unknown directive %q", st.line, st.directive[0])
			}
			continue
		}
		if env.PipeDir == "" { // before the first daemon: a directory without one
			env = mps.Env{PipeDir: t.TempDir()}
		}
		got, err := s.Run(t.Context(), env, st.command)
		if err != nil {
			t.Fatalf("line %d: %s: %v", st.line, st.command, err)
		}
		if got != st.want {
			t.Errorf("line %d: %s:\n got %q / %q / rc=%d\nwant %q / %q / rc=%d", st.line, st.command,
				got.Stdout, got.Stderr, got.ExitCode, st.want.Stdout, st.want.Stderr, st.want.ExitCode)
		}
	}
}

func TestSimMemLimitArgument(t *testing.T) {
	// mps-probe2.txt: what each argument of set_default_device_pinned_mem_limit became.
	cases := map[string]units.MiB{"512M": 512, "1G": 1024, "2g": 2048, "1T": 1, "0.5G": 0, "0": 0,
		"100K": 100, "1048576K": 1048576, "abc": 0, "20389M": 20389}
	for arg, want := range cases {
		if got := readMemLimit(arg); got != want {
			t.Errorf("readMemLimit(%q) = %d, want %d", arg, got, want)
		}
	}
}

func TestSimStartAndQuitFiles(t *testing.T) {
	s, env := startSim(t)
	for _, f := range []string{"control", "control_privileged", "control_lock", "log", pidFile} {
		if _, err := os.Stat(filepath.Join(env.PipeDir, f)); err != nil {
			t.Errorf("pipe directory lacks %s: %v", f, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(env.PipeDir, pidFile)); string(b) != strconv.Itoa(os.Getpid()) {
		t.Errorf("pid file holds %q, want %d", b, os.Getpid())
	}
	if b, _ := os.ReadFile(filepath.Join(env.LogDir, "control.log")); !strings.Contains(string(b), "SIMULATED") {
		t.Errorf("control.log does not say the daemon is simulated:\n%s", b)
	}
	if err := s.Start(t.Context(), env); err == nil {
		t.Error("a second Start in the same pipe directory succeeded")
	}
	if _, err := s.Run(t.Context(), env, "quit"); err != nil {
		t.Fatal(err)
	}
	// What the real quit leaves (mps-probe.txt): the sockets and control_lock.
	for f, want := range map[string]bool{"control": true, "control_privileged": true, "control_lock": true, "log": false, pidFile: false} {
		if _, err := os.Stat(filepath.Join(env.PipeDir, f)); (err == nil) != want {
			t.Errorf("after quit, %s present = %v, want %v", f, err == nil, want)
		}
	}
}

func TestSimStateOutlivesTheRunner(t *testing.T) {
	dir := t.TempDir()
	env := mps.Env{PipeDir: filepath.Join(dir, "p"), LogDir: filepath.Join(dir, "l")}
	first := New(nil)
	if err := first.Start(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Run(t.Context(), env, "set_default_active_thread_percentage 25"); err != nil {
		t.Fatal(err)
	}
	// A new runner, as after the agent restarted, finds the same daemon.
	second := New(nil)
	got, err := second.Run(t.Context(), env, "get_default_active_thread_percentage")
	if err != nil || got != (mps.Output{Stdout: "25.0\n"}) {
		t.Fatalf("new runner: %+v, %v; want the 25.0 set through the first", got, err)
	}
}

// TestSimDaemonsAnswerSideBySide: a command held up on one GPU's daemon (its
// pipe directory's lock taken, as by a slow command) does not hold up
// another GPU's, which answers as real per-GPU daemons do.
func TestSimDaemonsAnswerSideBySide(t *testing.T) {
	dir := t.TempDir()
	s := New(nil)
	var envs []mps.Env
	for _, gpu := range []string{"a", "b"} {
		env := mps.Env{PipeDir: filepath.Join(dir, gpu, "pipe"), LogDir: filepath.Join(dir, gpu, "log")}
		if err := s.Start(t.Context(), env); err != nil {
			t.Fatal(err)
		}
		envs = append(envs, env)
	}
	held := s.dirLock(envs[0].PipeDir)
	held.Lock()
	release := sync.OnceFunc(held.Unlock)
	defer release() // a failed assertion must not leave the goroutine blocked
	done := make(chan error, 1)
	go func() {
		_, err := s.Run(t.Context(), envs[0], "get_server_list")
		done <- err
	}()
	for _, cmd := range []string{"set_default_active_thread_percentage 25", "get_default_active_thread_percentage"} {
		out, err := s.Run(t.Context(), envs[1], cmd)
		if err != nil || out != (mps.Output{Stdout: "25.0\n"}) {
			t.Fatalf("%s on the other daemon = %+v, %v; want 25.0", cmd, out, err)
		}
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("the held daemon, once free: %v", err)
	}
}

// TestSimSetterOfTheHeldValueWritesNothing: a setter given the value the
// daemon holds answers as ever and leaves the state file alone (same
// inode); a new value replaces it.
func TestSimSetterOfTheHeldValueWritesNothing(t *testing.T) {
	s, env := startSim(t)
	inode := func() uint64 {
		t.Helper()
		fi, err := os.Stat(filepath.Join(env.PipeDir, simStateFile))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	run := func(cmd, want string) {
		t.Helper()
		if out, err := s.Run(t.Context(), env, cmd); err != nil || out != (mps.Output{Stdout: want}) {
			t.Fatalf("%s = %+v, %v; want %q", cmd, out, err, want)
		}
	}
	started := inode()
	for _, cmd := range []struct{ line, out string }{
		{"set_default_active_thread_percentage 100", "100.0\n"},
		{"set_default_client_priority 0", ""},
		{"set_default_device_pinned_mem_limit 0 0", ""},
	} {
		run(cmd.line, cmd.out)
		if inode() != started {
			t.Fatalf("%s, the value held, rewrote the state", cmd.line)
		}
	}
	run("set_default_device_pinned_mem_limit 0 20G", "")
	if inode() == started {
		t.Fatal("a new memory limit left the state as it was")
	}
	run("get_default_device_pinned_mem_limit 0", "20G\n")
}

// TestSimEmptyStateIsNoDaemon: the state is not synced (a daemon's memory,
// which a reboot ends), so a crash of the host may leave it empty; that
// reads as no daemon, and a new one starts there.
func TestSimEmptyStateIsNoDaemon(t *testing.T) {
	s, env := startSim(t)
	if err := os.WriteFile(filepath.Join(env.PipeDir, simStateFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := s.Run(t.Context(), env, "get_server_list")
	if err != nil || out.ExitCode != 1 || out.Stderr != mps.MsgNoDaemon+"\n" {
		t.Fatalf("get_server_list = %+v, %v; want no daemon", out, err)
	}
	if err := s.Start(t.Context(), env); err != nil {
		t.Fatalf("starting over an empty state: %v", err)
	}
	if out, err := s.Run(t.Context(), env, "get_default_active_thread_percentage"); err != nil || out.Stdout != "100.0\n" {
		t.Fatalf("the new daemon answers %+v, %v; want its default 100.0", out, err)
	}
}

func TestSimServersKeepTheirLimits(t *testing.T) {
	s, env := startSim(t)
	run := func(cmd string) string {
		t.Helper()
		out, err := s.Run(t.Context(), env, cmd)
		if err != nil {
			t.Fatal(err)
		}
		return out.Stdout
	}
	run("set_default_active_thread_percentage 25")
	run("set_default_device_pinned_mem_limit 0 20389M")
	srv, err := s.AddClient(env.PipeDir, 981)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.AddClient(env.PipeDir, 982)
	if err != nil || again != srv {
		t.Fatalf("second client got server %d (%v), want the running server %d", again, err, srv)
	}
	// Defaults changed later apply to servers started later only.
	run("set_default_active_thread_percentage 50")
	run("set_default_device_pinned_mem_limit 0 8G")
	if got := run(fmt.Sprintf("get_active_thread_percentage %d", srv)); got != "25.0\n" {
		t.Errorf("running server's percentage = %q, want 25.0", got)
	}
	if got := run(fmt.Sprintf("get_device_pinned_mem_limit %d 0", srv)); got != "19G\n" {
		t.Errorf("running server's limit = %q, want 19G", got)
	}
	// The server enforces the exact value; only the getter rounds it.
	if l, err := s.EnforcedLimits(env.PipeDir, srv); err != nil || l != (mps.Limits{MemoryLimit: 20389, ThreadPercentage: 25}) {
		t.Errorf("EnforcedLimits = %+v, %v; want 20389 MiB and 25%%", l, err)
	}
	if err := s.RemoveClient(env.PipeDir, 981); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveClient(env.PipeDir, 981); err == nil {
		t.Error("removing a client twice succeeded")
	}
	if got := run(fmt.Sprintf("get_client_list %d", srv)); got != "982\n" {
		t.Errorf("clients = %q, want 982", got)
	}
	if got := run("get_server_list"); got != fmt.Sprintf("%d\n", srv) {
		t.Errorf("servers = %q: the server stays up after a client leaves", got)
	}
}

func TestSimKill(t *testing.T) {
	s, env := startSim(t)
	if _, err := s.AddClient(env.PipeDir, 981); err != nil {
		t.Fatal(err)
	}
	s.Kill(env.PipeDir)
	got, err := s.Run(t.Context(), env, "get_server_list")
	if err != nil || got.ExitCode != 1 || got.Stderr != "Cannot find MPS control daemon process\n" {
		t.Fatalf("after kill: %+v, %v; want no daemon", got, err)
	}
	if _, err := os.Stat(filepath.Join(env.PipeDir, pidFile)); err != nil {
		t.Errorf("kill -9 cleans nothing up, but the pid file is gone: %v", err)
	}
	if _, err := s.AddClient(env.PipeDir, 981); err == nil {
		t.Error("a client connected to a killed daemon")
	}
	// A new daemon starts in the same directory, without the old servers.
	if err := s.Start(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Run(t.Context(), env, "get_server_list"); got.Stdout != "" {
		t.Errorf("new daemon lists servers %q", got.Stdout)
	}
}

func TestSimNoPipeDirectory(t *testing.T) {
	s := New(nil)
	env := mps.Env{PipeDir: filepath.Join(t.TempDir(), "missing")}
	got, err := s.Run(t.Context(), env, "get_server_list")
	if err != nil || got.ExitCode != 1 {
		t.Fatalf("Run = %+v, %v; want no daemon", got, err)
	}
	if _, err := os.Stat(env.PipeDir); err == nil {
		t.Error("asking a missing pipe directory created it")
	}
}

// startSim starts a simulated control daemon in a new temporary directory.
func startSim(t *testing.T) (*Runner, mps.Env) {
	t.Helper()
	dir := t.TempDir()
	env := mps.Env{PipeDir: filepath.Join(dir, "p"), LogDir: filepath.Join(dir, "l")}
	s := New(nil)
	if err := s.Start(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	return s, env
}

// The simulated daemon's privileged socket, as measured on an H200
// (docs/gpu-runs/probe-privileged-2026-11-29.txt): its sockets are sockets
// of the real modes; through a directory that does not hold the socket the
// daemon made (moved away, a placeholder or another socket of its name
// instead) quit and set_default_* are refused with the real texts and
// change nothing, while questions and a server's commands are answered;
// through a directory holding it with links to the rest, everything works.
func TestSimPrivilegedSocket(t *testing.T) {
	s, env := startSim(t)
	for f, want := range map[string]os.FileMode{"control": os.ModeSocket | 0o666, mps.PrivilegedSocket: os.ModeSocket | 0o755} {
		if fi, err := os.Lstat(filepath.Join(env.PipeDir, f)); err != nil || fi.Mode() != want {
			t.Errorf("%s: %v, %v; want %v", f, fi.Mode(), err, want)
		}
	}
	srv, err := s.AddClient(env.PipeDir, 700)
	if err != nil {
		t.Fatal(err)
	}
	run := func(dir, cmd string) string {
		t.Helper()
		out, err := s.Run(t.Context(), mps.Env{PipeDir: dir}, cmd)
		if err != nil || out.ExitCode != 0 {
			t.Fatalf("%s through %s: %+v %v", cmd, dir, out, err)
		}
		return strings.TrimSpace(out.Stdout)
	}
	refused := fmt.Sprintf(mps.MsgSettingsRefused, os.Geteuid())
	// Moved into a private directory of links: the pipe directory is
	// refused, the private one privileged.
	priv := filepath.Join(filepath.Dir(env.PipeDir), "priv")
	if err := os.Mkdir(priv, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(env.PipeDir, mps.PrivilegedSocket), filepath.Join(priv, mps.PrivilegedSocket)); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"control", "control_lock", pidFile, "log"} {
		if err := os.Symlink(filepath.Join(env.PipeDir, f), filepath.Join(priv, f)); err != nil {
			t.Fatal(err)
		}
	}
	check := func(dir string) {
		t.Helper()
		for cmd, want := range map[string]string{
			"quit": mps.MsgQuitRefused,
			"set_default_active_thread_percentage 37":                   refused,
			"set_default_device_pinned_mem_limit 0 3G":                  refused,
			"set_default_client_priority 1":                             refused,
			"get_default_active_thread_percentage":                      "100.0",
			"get_server_list":                                           strconv.Itoa(srv),
			"set_active_thread_percentage " + strconv.Itoa(srv) + " 12": "12.0",
		} {
			if got := run(dir, cmd); got != want {
				t.Errorf("%s through %s: %q, want %q", cmd, dir, got, want)
			}
		}
	}
	check(env.PipeDir)
	// A socket of the name that is not the daemon's: no privilege either.
	if err := syscall.Mknod(filepath.Join(env.PipeDir, mps.PrivilegedSocket), syscall.S_IFSOCK|0o755, 0); err != nil {
		t.Fatal(err)
	}
	check(env.PipeDir)
	log, _ := os.ReadFile(filepath.Join(env.LogDir, "control.log"))
	if !strings.Contains(string(log), "] Cmd:quit\n") || !strings.Contains(string(log), "] "+mps.MsgQuitRefused+"\n") {
		t.Errorf("control.log lacks the refused quit and its refusal:\n%s", log)
	}
	if got := run(priv, "set_default_active_thread_percentage 40"); got != "40.0" {
		t.Errorf("set_default_active_thread_percentage through the private directory: %q", got)
	}
	if got := run(env.PipeDir, "get_default_active_thread_percentage"); got != "40.0" {
		t.Errorf("the default set through the private directory reads %q in the pipe directory", got)
	}
	if got := run(priv, "quit"); got != "" {
		t.Errorf("quit through the private directory: %q", got)
	}
	if out, _ := s.Run(t.Context(), env, "get_server_list"); out.ExitCode != 1 {
		t.Errorf("the daemon still answers after quit: %+v", out)
	}
}
