package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	tspodman "yunion.io/x/mps-daemon/internal/testsupport/podman"
)

// podman is the shared podman of the suites (internal/testsupport/podman),
// with the containers this suite runs in the background.
type podman struct {
	*tspodman.Podman
	t *testing.T
}

func newPodman(t *testing.T, cdiDir string) *podman {
	t.Helper()
	return &podman{Podman: tspodman.New(t, cdiDir), t: t}
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
	c.cmd = p.Command(context.Background(), args...)
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
			_ = p.Command(ctx, "rm", "-f", "-t", "0", id).Run()
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
