package accounting

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/identity"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// TestExitRaceOnRealProc runs the exit race against the kernel's procfs
// rather than a fake tree: a process that names a device in its
// environment is opened, then killed (a zombie) and reaped while its
// /proc directory is held open. Whatever errno the kernel gives (ENOENT,
// ESRCH), every read through the held directory must say the process
// exited, or fail otherwise, and never yield the device it named: a
// process that is gone is billed to nothing.
func TestExitRaceOnRealProc(t *testing.T) {
	dev := gpuA + "::0"
	cmd := startExeced(t, []string{vdev.EnvVar + "=" + dev})
	pid := cmd.Process.Pid
	reaped := false
	t.Cleanup(func() {
		if !reaped {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	m := &Mapper{ProcRoot: "/proc"}
	if err := m.Refresh(); err != nil && !errors.Is(err, ErrOwnNamespace) {
		t.Fatal(err)
	}

	// Alive: billed by its environment (it runs in the test's mount
	// namespace, the host's or the one standing for it).
	id, err := m.Lookup(pid, gpuA)
	if err != nil || id.Device != dev || id.Source != SourceEnviron || id.StartTicks == 0 {
		t.Fatalf("live process: %+v, %v; want %s from its environment", id, err, dev)
	}
	p, err := m.open(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if st, err := p.stat(); err != nil || st.StartTicks != id.StartTicks || st.PPID != os.Getpid() {
		t.Fatalf("live stat: %+v, %v", st, err)
	}
	if name, _, err := identity.Find(p.fd(), gpuA, nil); !errors.Is(err, identity.ErrNotFound) {
		t.Fatalf("live process without an identity file: %q, %v; want ErrNotFound", name, err)
	}

	// Killed, not reaped: a zombie, which NVML may still list.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := p.stat()
		if errors.Is(err, ErrExited) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("killed process: stat says %v; want ErrExited (a zombie)", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if id, err := m.Lookup(pid, gpuA); !errors.Is(err, ErrExited) || id.Device != "" {
		t.Errorf("zombie: Lookup = %+v, %v; want ErrExited and no device", id, err)
	}
	if _, err := m.StartTicks(pid); !errors.Is(err, ErrExited) {
		t.Errorf("zombie: StartTicks: %v; want ErrExited", err)
	}
	if d, _, err := p.environ(); d == dev || err == nil {
		t.Errorf("zombie: environ = %q, %v; want an error and no device", d, err)
	}

	// Reaped: its directory, still held, belongs to nobody.
	cmd.Wait()
	reaped = true
	if _, err := p.stat(); !errors.Is(err, ErrExited) {
		t.Errorf("reaped: stat: %v; want ErrExited", err)
	}
	if d, q, err := p.environ(); !errors.Is(err, ErrExited) || d != "" || q.Unreadable == "" {
		t.Errorf("reaped: environ = %q, %+v, %v; want ErrExited, no device, its QoS unreadable", d, q, err)
	}
	if name, _, err := identity.Find(p.fd(), gpuA, nil); err == nil || errors.Is(err, identity.ErrNotFound) || name != "" {
		t.Errorf("reaped: identity.Find = %q, %v; want an error other than ErrNotFound", name, err)
	}
	if _, err := p.mountNS(); !errors.Is(err, ErrExited) {
		t.Errorf("reaped: mount namespace: %v; want ErrExited", err)
	}
	if err := p.gone(errors.New("some other failure")); !errors.Is(err, ErrExited) {
		t.Errorf("reaped: gone: %v; want ErrExited to win", err)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
		t.Logf("PID %d already reused: Lookup by PID not checked", pid)
	} else if id, err := m.Lookup(pid, gpuA); !errors.Is(err, ErrExited) || id.Device != "" {
		t.Errorf("reaped: Lookup = %+v, %v; want ErrExited and no device", id, err)
	}
}

// TestLargeEnvironmentOnRealProc: a real process started with an
// environment over 1 MiB, its device and QoS variables last, is read whole
// through the kernel's procfs: billed to its device, its QoS variables
// found, no escape (issue 23: such a batch client was terminated under
// enforce for its size alone).
func TestLargeEnvironmentOnRealProc(t *testing.T) {
	dev := gpuA + "::1"
	var env []string
	for i := range 12 { // 12 x 100 KiB: execve takes at most 128 KiB per string
		env = append(env, "PAD"+strconv.Itoa(i)+"="+strings.Repeat("x", 100<<10))
	}
	env = append(env, vdev.EnvThreadPercentage+"=13", vdev.EnvClientPriority+"=1", vdev.EnvVar+"="+dev)
	cmd := startExeced(t, env)
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/environ")
	if err != nil || len(raw) <= 1<<20 {
		t.Fatalf("the process's environment is %d bytes (%v); the test needs more than 1 MiB", len(raw), err)
	}
	m := &Mapper{ProcRoot: "/proc"}
	if err := m.Refresh(); err != nil && !errors.Is(err, ErrOwnNamespace) {
		t.Fatal(err)
	}
	id, err := m.Lookup(cmd.Process.Pid, gpuA)
	if err != nil || id.Device != dev || id.Source != SourceEnviron {
		t.Fatalf("Lookup = %+v, %v; want %s from its environment of %d bytes", id, err, dev, len(raw))
	}
	if id.QoSEnv.Unreadable != "" || id.QoSEnv.ThreadPercentage.Value != "13" || id.QoSEnv.ClientPriority.Value != "1" {
		t.Errorf("QoS variables %+v, want 13 and 1 read from it", id.QoSEnv)
	}
	q := DeviceQoS{ThreadPercentage: 13, ClientPriority: 1, Server: vdev.ServerDefaults{ThreadPercentage: 50, ClientPriority: 1}}
	if why := CheckQoS(id.QoSEnv, q); why != "" {
		t.Errorf("a compliant client with a %d-byte environment is an escape: %s", len(raw), why)
	}
}

// startExeced starts cat with env and returns once it runs. cmd.Start
// returns once the child's execve has closed its close-on-exec pipe,
// before the kernel has laid out the new program's environment:
// /proc/<pid>/environ can still be empty then. cat echoes a line only once
// it runs, so the echo proves the exec finished; it then blocks reading its
// stdin (kept open until the test ends), same PID. The caller reaps it.
func startExeced(t *testing.T, env []string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("cat")
	cmd.Env = env
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	if _, err := io.WriteString(in, "running\n"); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "running\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("cat never echoed: %q, %v", line, err)
	}
	return cmd
}

// TestSignalSameOnRealProc: SyscallKiller signals a real process only
// while the check it is given holds, asked with the process's pidfd open;
// once the process is reaped the PID is refused (ESRCH), never guessed at.
func TestSignalSameOnRealProc(t *testing.T) {
	cmd := startExeced(t, []string{"X=1"})
	pid := cmd.Process.Pid
	reaped := false
	t.Cleanup(func() {
		if !reaped {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	var k SyscallKiller
	asked := 0
	if err := k.SignalSame(pid, syscall.SIGKILL, func() bool { asked++; return false }); !errors.Is(err, errNotSame) || asked != 1 {
		t.Fatalf("a failed check: %v (asked %d); want errNotSame and no signal", err, asked)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the process was signalled though its check failed: %v", err)
	}
	m := &Mapper{ProcRoot: "/proc"}
	start, err := m.StartTicks(pid)
	if err != nil {
		t.Fatal(err)
	}
	same := func() bool { s, err := m.StartTicks(pid); return err == nil && s == start }
	if err := k.SignalSame(pid, syscall.SIGKILL, same); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	reaped = true
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the process ended with %v, want SIGKILL", err)
	}
	if err := k.SignalSame(pid, syscall.SIGKILL, same); !errors.Is(err, syscall.ESRCH) && !errors.Is(err, errNotSame) {
		t.Errorf("a reaped PID: %v; want ESRCH (or, reused already, errNotSame)", err)
	}
}
