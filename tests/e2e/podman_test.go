package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// podman runs Debian's Podman against a throwaway store of its own (vfs
// storage in a temporary directory, cgroupfs, no events), so nothing of the
// machine's images, containers or settings is used or changed. Podman reads
// CDI specs only from /etc/cdi and /var/run/cdi (4.3.1 has no setting for
// it), so every podman command runs in a private mount namespace where the
// daemon's CDI directory is bind-mounted over /var/run/cdi: the spec it
// consumes is the daemon's file, byte for byte, and no other process on the
// machine sees it.
type podman struct {
	t      *testing.T
	global []string
	cdiDir string
}

// requirePodman skips the test where Podman cannot run containers here (not
// root, a tool missing), or fails it when MPS_REQUIRE_PODMAN=1 (.ci/run
// installs podman, runc and busybox-static).
func requirePodman(t *testing.T) (busybox string) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, tool := range []string{"podman", "runc", "unshare", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	busybox = "/bin/busybox"
	if err := isStatic(busybox); err != nil {
		missing = append(missing, "a static busybox (Debian's busybox-static): "+err.Error())
	}
	if len(missing) == 0 {
		return busybox
	}
	msg := "podman tests need " + strings.Join(missing, ", ")
	if os.Getenv("MPS_REQUIRE_PODMAN") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func isStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked", path)
		}
	}
	return nil
}

func newPodman(t *testing.T, cdiDir string) *podman {
	t.Helper()
	store, err := os.MkdirTemp("", "mps-podman")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(store) })
	for _, d := range []string{"root", "runroot", "tmp"} {
		if err := os.Mkdir(filepath.Join(store, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// The mount point: CDI's directory for generated specs. Created empty
	// when the machine has none (as a CDI runtime's host has); never written.
	if err := os.MkdirAll("/var/run/cdi", 0o755); err != nil {
		t.Fatal(err)
	}
	return &podman{t: t, cdiDir: cdiDir, global: []string{
		"--root", filepath.Join(store, "root"), "--runroot", filepath.Join(store, "runroot"),
		"--tmpdir", filepath.Join(store, "tmp"), "--storage-driver", "vfs",
		"--cgroup-manager", "cgroupfs", "--events-backend", "none",
	}}
}

// command is podman with args in the private mount namespace.
func (p *podman) command(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"--mount", "--propagation", "private", "sh", "-c",
		`mount --bind "$1" /var/run/cdi && shift && exec podman "$@"`, "sh", p.cdiDir}, p.global...)
	return exec.CommandContext(ctx, "unshare", append(full, args...)...)
}

func (p *podman) run(args ...string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := p.command(ctx, args...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// image imports a one-layer image of the static busybox, no registry.
func (p *podman) image(busybox string) string {
	p.t.Helper()
	tarball := filepath.Join(p.t.TempDir(), "rootfs.tar")
	if err := writeRootfs(tarball, busybox); err != nil {
		p.t.Fatal(err)
	}
	name := fmt.Sprintf("localhost/mps-e2e-busybox:%d", time.Now().UnixNano())
	p.run("import", tarball, name)
	return name
}

// writeRootfs writes a root file system holding busybox and its applets.
func writeRootfs(path, busybox string) error {
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := tar.NewWriter(f)
	for _, d := range []string{"bin", "dev", "proc", "sys", "run", "tmp", "etc"} {
		if err := w.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			return err
		}
	}
	if err := w.WriteHeader(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bb))}); err != nil {
		return err
	}
	if _, err := w.Write(bb); err != nil {
		return err
	}
	for _, a := range []string{"sh", "cat", "cp", "cut", "echo", "env", "grep", "kill", "ls", "mkdir", "mount", "umount",
		"sleep", "stat", "touch", "chroot", "unshare", "wait", "test", "true"} {
		if err := w.WriteHeader(&tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}

// container is a `podman run` in the foreground whose output lines are
// kept, "KEY value" lines in a map.
type container struct {
	cmd    *exec.Cmd
	cidf   string
	mu     sync.Mutex
	lines  []string
	fields map[string]string
	done   chan struct{}
}

func (p *podman) start(name string, args ...string) *container {
	p.t.Helper()
	c := &container{cidf: filepath.Join(p.t.TempDir(), name+".cid"), fields: map[string]string{}, done: make(chan struct{})}
	full := append([]string{"run", "--rm", "--cidfile", c.cidf, "--network", "none", "--runtime", "runc",
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}, args...)
	p.launch(c, name, full)
	return c
}

// exec runs args in the running container in, as `podman exec` does: the
// runtime starts the process in the container's namespaces and cgroup,
// as a child of the runtime, not of the container's processes. Its output
// is kept as start keeps a container's.
func (p *podman) exec(in *container, name string, args ...string) *container {
	p.t.Helper()
	c := &container{cidf: in.cidf, fields: map[string]string{}, done: make(chan struct{})}
	p.launch(c, name, append([]string{"exec", in.id()}, args...))
	return c
}

// launch starts podman with args in the background, its output lines kept
// in c; the container is removed when the test ends.
func (p *podman) launch(c *container, name string, args []string) {
	p.t.Helper()
	c.cmd = p.command(context.Background(), args...)
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		p.t.Fatal(err)
	}
	c.cmd.Stderr = c.cmd.Stdout
	if err := c.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	go func() {
		defer close(c.done)
		s := bufio.NewScanner(out)
		for s.Scan() {
			c.mu.Lock()
			c.lines = append(c.lines, s.Text())
			if k, v, ok := strings.Cut(s.Text(), " "); ok {
				c.fields[k] = v
			} else {
				c.fields[s.Text()] = ""
			}
			c.mu.Unlock()
		}
		_ = c.cmd.Wait()
	}()
	p.t.Cleanup(func() {
		if id := c.id(); id != "" {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = p.command(ctx, "rm", "-f", "-t", "0", id).Run()
		}
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
		}
		if p.t.Failed() {
			p.t.Logf("%s printed:\n%s", name, c.output())
		}
	})
}

func (c *container) field(k string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.fields[k]
	return v, ok
}

func (c *container) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.lines, "\n")
}

func (c *container) id() string {
	b, _ := os.ReadFile(c.cidf)
	return strings.TrimSpace(string(b))
}

// ready waits for the script's READY line.
func (c *container) ready(t *testing.T) {
	t.Helper()
	eventually(t, "container ready", func() (bool, string) {
		_, ok := c.field("READY")
		select {
		case <-c.done:
			t.Fatalf("the container exited:\n%s", c.output())
		default:
		}
		return ok, c.output()
	})
}

// hostPIDs maps the container's PIDs (its own PID namespace) to the host's,
// through the NSpid lines of the processes in its cgroup.
func (c *container) hostPIDs(t *testing.T) map[int]int {
	t.Helper()
	id := c.id()
	if id == "" {
		t.Fatal("no container id")
	}
	out := map[int]int{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil || !bytes.Contains(cg, []byte("libpod-"+id)) {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(status), "\n") {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == "NSpid:" {
				inner, _ := strconv.Atoi(f[len(f)-1])
				out[inner] = pid
			}
		}
	}
	return out
}

// pid is the host PID of the container process the script named role.
func (c *container) pid(t *testing.T, role string) int {
	t.Helper()
	v, ok := c.field("PID_" + role)
	if !ok {
		t.Fatalf("the container printed no PID for %s:\n%s", role, c.output())
	}
	inner, _ := strconv.Atoi(v)
	host, ok := c.hostPIDs(t)[inner]
	if !ok {
		t.Fatalf("no host process for %s (PID %d in the container)", role, inner)
	}
	return host
}

func alive(pid int) bool {
	_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
	return !errors.Is(err, fs.ErrNotExist)
}
