package pod

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	ctr     = "4f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b"
	server  = "6a2d3e86-33c5-4b4f-8bbf-7a1e2c3d4e5f"
	sandbox = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d"
)

// A process's container is the first component under the parent on its
// v2 line or any v1 hierarchy's; sub-cgroups stay its; lines naming two
// containers, ids that could leave a directory and malformed lines are
// refused; a process elsewhere is in no pod.
func TestContainerOf(t *testing.T) {
	for _, tc := range []struct {
		name, cg, want, err string
		notPod              bool
	}{
		{name: "v2", cg: "0::/cloudpods/" + ctr + "\n", want: ctr},
		{name: "v2 sub-cgroup", cg: "0::/cloudpods/" + ctr + "/mine/deeper\n", want: ctr},
		{name: "v1", cg: "12:pids:/cloudpods/" + ctr + "\n4:memory:/cloudpods/" + ctr + "\n1:name=systemd:/cloudpods/" + ctr + "\n", want: ctr},
		{name: "v1 and elsewhere", cg: "12:pids:/user.slice\n4:memory:/cloudpods/" + ctr + "\n", want: ctr},
		{name: "hybrid", cg: "1:name=systemd:/system.slice/x\n0::/cloudpods/" + ctr + "\n", want: ctr},
		{name: "host", cg: "0::/system.slice/yunion-mps-daemon.service\n", notPod: true},
		{name: "root", cg: "0::/\n", notPod: true},
		{name: "the parent itself", cg: "0::/cloudpods\n", notPod: true},
		{name: "a parent's look-alike", cg: "0::/cloudpods-x/" + ctr + "\n", notPod: true},
		{name: "empty", cg: "", notPod: true},
		{name: "two containers", cg: "4:memory:/cloudpods/aaa\n0::/cloudpods/bbb\n", err: "two containers"},
		{name: "dot-dot", cg: "0::/cloudpods/../etc\n", err: "not a container id"},
		{name: "dot", cg: "0::/cloudpods/./x\n", err: "not a container id"},
		{name: "empty id", cg: "0::/cloudpods//x\n", err: "not a container id"},
		{name: "too long", cg: "0::/cloudpods/" + strings.Repeat("a", 77) + "\n", err: "not a container id"},
		{name: "no colons", cg: "garbage\n", err: "want id:controllers:path"},
		{name: "path with colons", cg: "0::/cloudpods/" + ctr + "/a:b\n", want: ctr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ContainerOf([]byte(tc.cg), "/cloudpods/")
			switch {
			case tc.notPod:
				if !errors.Is(err, ErrNotPod) {
					t.Errorf("got %q, %v; want ErrNotPod", got, err)
				}
			case tc.err != "":
				if err == nil || errors.Is(err, ErrNotPod) || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("got %q, %v; want an error saying %q", got, err, tc.err)
				}
			case err != nil || got != tc.want:
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := ContainerOf([]byte("0::/"+ctr+"\n"), "/"); !errors.Is(err, ErrNotPod) {
		t.Errorf("parent / makes every process a pod's: %v", err)
	}
}

// spec is a container's config.json as containerd's CRI writes it for a
// Cloudpods pod.
func spec(cgroupsPath, uid, name string) string {
	return `{"ociVersion":"1.2.0","process":{"env":["PATH=/bin","CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps/pipe"]},` +
		`"annotations":{"io.kubernetes.cri.container-type":"container","io.kubernetes.cri.sandbox-id":"` + sandbox + `",` +
		`"io.kubernetes.cri.sandbox-uid":"` + uid + `","io.kubernetes.cri.sandbox-name":"` + name + `",` +
		`"io.kubernetes.cri.sandbox-namespace":"project-1"},"linux":{"cgroupsPath":"` + cgroupsPath + `"}}`
}

func TestParseBundle(t *testing.T) {
	cg := "/cloudpods/" + ctr
	p, err := ParseBundle([]byte(spec(cg, server, "gpu-pod-1")), cg)
	if err != nil || p.Server != server || p.Name != "gpu-pod-1" || p.Source != SourceCRI {
		t.Fatalf("got %+v, %v", p, err)
	}
	for _, tc := range []struct{ name, spec, err string }{
		{"another cgroup", spec("/cloudpods/other", server, "n"), "cgroupsPath"},
		{"no uid", spec(cg, "", "n"), "not a container made through CRI"},
		{"uid with a newline", strings.Replace(spec(cg, "x", "n"), `"x"`, `"x\ny"`, 1), "not a server id"},
		{"not JSON", "{", "not an OCI spec"},
	} {
		if _, err := ParseBundle([]byte(tc.spec), cg); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
	if p, err := ParseBundle([]byte(spec(cg, server, strings.Repeat("n", 300))), cg); err != nil || p.Name != "" {
		t.Errorf("an overlong name: %+v %v, want the pod without a name", p, err)
	}
}

// host is a containerd state directory and a host agent's servers_path.
type host struct{ state, servers string }

func newHost(t *testing.T) host {
	dir := t.TempDir()
	h := host{state: filepath.Join(dir, "run", "containerd"), servers: filepath.Join(dir, "servers")}
	for _, d := range []string{h.state, h.servers} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func (h host) bundle(t *testing.T, id, content string) string {
	dir := filepath.Join(h.state, "io.containerd.runtime.v2.task", "k8s.io", id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func (h host) agent(t *testing.T, srv, name string, criIDs ...string) {
	dir := filepath.Join(h.servers, srv)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var parts []string
	for i, id := range criIDs {
		parts = append(parts, `"ctr-`+string(rune('a'+i))+`":{"id":"ctr","index":0,"cri_id":"`+id+`"}`)
	}
	if err := os.WriteFile(filepath.Join(dir, "containers"), []byte("{"+strings.Join(parts, ",")+"}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "desc"), []byte(`{"uuid":"`+srv+`","name":"`+name+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (h host) finder(now func() time.Time) *Finder {
	return NewFinder(Options{CgroupParent: "cloudpods", StateDir: h.state, ServersPath: h.servers, Now: now})
}

// A pod's server comes from containerd's bundle, is remembered by
// container (the bundle's removal does not change it), and a process
// outside any pod's cgroup is in none.
func TestFindFromBundle(t *testing.T) {
	h := newHost(t)
	path := h.bundle(t, ctr, spec("/cloudpods/"+ctr, server, "gpu-pod-1"))
	f := h.finder(nil)
	p, err := f.Find([]byte("0::/cloudpods/" + ctr + "/sub\n"))
	if err != nil || p != (Pod{Server: server, Name: "gpu-pod-1", Container: ctr, Source: SourceCRI}) {
		t.Fatalf("got %+v, %v", p, err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if p2, err := f.Find([]byte("0::/cloudpods/" + ctr + "\n")); err != nil || p2 != p {
		t.Errorf("cached: %+v %v", p2, err)
	}
	if _, err := f.Find([]byte("0::/user.slice/session-1.scope\n")); !errors.Is(err, ErrNotPod) {
		t.Errorf("a host process: %v", err)
	}
	if NewFinder(Options{}) != nil {
		t.Error("no cgroup parent still finds pods")
	}
}

// A bundle that is a link, a FIFO, too large or of another cgroup is not
// believed; without the host agent's record the pod's server is unknown,
// and the error says why.
func TestFindRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, h host, path string)
		want string
	}{
		{"a link", func(t *testing.T, h host, path string) {
			other := filepath.Join(filepath.Dir(h.state), "elsewhere.json")
			if err := os.WriteFile(other, []byte(spec("/cloudpods/"+ctr, server, "n")), 0o644); err != nil {
				t.Fatal(err)
			}
			os.Remove(path)
			if err := os.Symlink(other, path); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"a FIFO", func(t *testing.T, h host, path string) {
			os.Remove(path)
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"too large", func(t *testing.T, h host, path string) {
			if err := os.WriteFile(path, make([]byte, maxBundle+1), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "more than"},
		{"another container's", func(t *testing.T, h host, path string) {
			if err := os.WriteFile(path, []byte(spec("/cloudpods/other", server, "n")), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "cgroupsPath"},
		{"missing", func(t *testing.T, h host, path string) { os.Remove(path) }, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t)
			path := h.bundle(t, ctr, spec("/cloudpods/"+ctr, server, "n"))
			tc.make(t, h, path)
			_, err := h.finder(nil).Find([]byte("0::/cloudpods/" + ctr + "\n"))
			if !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "no server under") {
				t.Errorf("got %v; want ErrUnknown saying %q and what the host agent's record lacks", err, tc.want)
			}
		})
	}
}

// Without containerd's bundle, Cloudpods' host agent's record names the
// server (and its desc its name); it is read again for a container it did
// not hold only after rescanAfter.
func TestFindFromHostAgent(t *testing.T) {
	h := newHost(t)
	h.agent(t, server, "gpu-pod-1", "other", ctr)
	h.agent(t, "vm-server", "vm") // a VM: no containers
	if err := os.WriteFile(filepath.Join(h.servers, "junk"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	f := h.finder(func() time.Time { return now })
	p, err := f.Find([]byte("0::/cloudpods/" + ctr + "\n"))
	if err != nil || p != (Pod{Server: server, Name: "gpu-pod-1", Container: ctr, Source: SourceHostAgent}) {
		t.Fatalf("got %+v, %v", p, err)
	}
	const late = "late0000"
	h.agent(t, "server-2", "pod-2", late)
	if _, err := f.Find([]byte("0::/cloudpods/" + late + "\n")); !errors.Is(err, ErrUnknown) {
		t.Errorf("read again before rescanAfter: %v", err)
	}
	now = now.Add(rescanAfter)
	if p, err := f.Find([]byte("0::/cloudpods/" + late + "\n")); err != nil || p.Server != "server-2" {
		t.Errorf("after rescanAfter: %+v %v", p, err)
	}
}
