package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	tspodman "yunion.io/x/mps-daemon/internal/testsupport/podman"
	"yunion.io/x/mps-daemon/internal/testsupport/process"
)

// containerd is a real containerd 2.x (built from the Go module proxy by
// .ci/run, MPS_CONTAINERD_BIN) with Debian's runc, run by the test with a
// root, state directory, socket and configuration of its own: CRI on with
// the cgroupfs driver and CDI off, as Cloudpods deploys it, the native
// snapshotter, pods on the host's network (runPod), and NRI on only when
// asked.
// crictl (sigs.k8s.io/cri-tools, the same way) speaks CRI to it, with
// Cloudpods' own sandbox and container configurations (cloudpodsPod).
type containerd struct {
	t                          *testing.T
	bin, dir, sock, state, log string
	proc                       *proc
}

// requireContainerd is the directory of containerd, its runc shim, ctr
// and crictl, and a static busybox; the test is skipped where they or
// root are missing, failed with MPS_REQUIRE_CONTAINERD=1 (.ci/run).
func requireContainerd(t *testing.T) (bin, busybox string) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	bin = os.Getenv("MPS_CONTAINERD_BIN")
	for _, tool := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "crictl"} {
		p := filepath.Join(bin, tool)
		if bin == "" {
			p, _ = exec.LookPath(tool)
		}
		if _, err := os.Stat(p); p == "" || err != nil {
			missing = append(missing, tool)
		} else if bin == "" {
			bin = filepath.Dir(p)
		}
	}
	if _, err := os.Stat("/usr/sbin/runc"); err != nil {
		missing = append(missing, "Debian's runc")
	}
	busybox = "/bin/busybox"
	if err := tspodman.IsStatic(busybox); err != nil {
		missing = append(missing, "a static busybox: "+err.Error())
	}
	if len(missing) == 0 {
		return bin, busybox
	}
	msg := "containerd tests need " + strings.Join(missing, ", ")
	if os.Getenv("MPS_REQUIRE_CONTAINERD") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return "", ""
}

// startContainerd starts containerd; nriSocket, when set, turns NRI on
// with its socket there.
func startContainerd(t *testing.T, bin, nriSocket string) *containerd {
	t.Helper()
	// Socket paths must stay under 107 bytes: a short root.
	dir, err := os.MkdirTemp("", "ctrd")
	if err != nil {
		t.Fatal(err)
	}
	c := &containerd{t: t, bin: bin, dir: dir, sock: filepath.Join(dir, "c.sock"), state: filepath.Join(dir, "state"), log: filepath.Join(dir, "logs")}
	t.Cleanup(func() { c.cleanup() })
	// No CNI configuration: the pods keep the host's network (runPod).
	for _, d := range []string{c.log, filepath.Join(dir, "cni")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tmpl, err := os.ReadFile(filepath.Join("testdata", "containerd.toml"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"DIR": dir, "IMAGE": busyboxImage, "RUNC": "/usr/sbin/runc", "ARCH": runtime.GOARCH,
		"NRI_DISABLE": "true", "NRI_SOCKET": filepath.Join(dir, "nri.sock")}
	if nriSocket != "" {
		vars["NRI_DISABLE"], vars["NRI_SOCKET"] = "false", nriSocket
	}
	conf := os.Expand(string(tmpl), func(k string) string {
		v, ok := vars[k]
		if !ok {
			t.Fatalf("testdata/containerd.toml: ${%s} is not a name startContainerd fills in", k)
		}
		return v
	})
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// Stopped (SIGTERM, killed after 20 s without failing the test) once
	// removePods, registered after it and so run before it, is done, and
	// before cleanup, registered before it, removes its files.
	c.proc = &proc{process.Start(t, process.Options{Env: []string{"PATH=" + bin + ":" + os.Getenv("PATH")}, Lenient: true},
		filepath.Join(bin, "containerd"), "--config", cfg)}
	t.Cleanup(c.removePods)
	eventually(t, "containerd's CRI answering", func() (bool, string) {
		if c.proc.Exited() {
			t.Fatalf("containerd exited:\n%s", c.proc.Output())
		}
		_, err := c.try("info")
		return err == nil, fmt.Sprint(err)
	})
	return c
}

// removePods removes every pod while containerd still answers.
func (c *containerd) removePods() {
	if c.proc.Exited() {
		return
	}
	if out, err := c.try("pods", "-q"); err == nil {
		for _, id := range strings.Fields(out) {
			_, _ = c.try("stopp", id)
			_, _ = c.try("rmp", "-f", id)
		}
	}
}

// cleanup removes containerd's files (the native snapshotter's copies
// included), containerd stopped.
func (c *containerd) cleanup() {
	_ = exec.Command("umount", "-R", "-l", c.dir).Run()
	_ = os.RemoveAll(c.dir)
}

// try runs crictl against this containerd.
func (c *containerd) try(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "crictl"), append([]string{"--runtime-endpoint", "unix://" + c.sock,
		"--image-endpoint", "unix://" + c.sock, "--timeout", "50s"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("crictl %s: %v: %s", strings.Join(args, " "), err, errOut.String())
	}
	return strings.TrimSpace(out.String()), nil
}

func (c *containerd) crictl(args ...string) string {
	c.t.Helper()
	out, err := c.try(args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// busyboxImage is the image every pod runs (its sandbox too): the static
// busybox, imported without a registry.
const busyboxImage = "localhost/mps-e2e-busybox:1"

// importImage imports busyboxImage, an OCI archive made here, with ctr.
func (c *containerd) importImage(busybox string) {
	c.t.Helper()
	archive := filepath.Join(c.dir, "busybox.oci.tar")
	if err := writeOCIArchive(archive, busybox, busyboxImage); err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(c.bin, "ctr"), "--address", c.sock, "--namespace", "k8s.io",
		"images", "import", "--snapshotter", "native", archive).CombinedOutput()
	if err != nil {
		c.t.Fatalf("ctr images import: %v\n%s", err, out)
	}
}

// writeOCIArchive writes an OCI image archive of one uncompressed layer,
// the busybox root file system podman's images are made of
// (tspodman.WriteRootfs), named name, whose command sleeps (the sandbox's
// own process).
func writeOCIArchive(path, busybox, name string) error {
	layerPath := path + ".layer"
	if err := tspodman.WriteRootfs(layerPath, busybox); err != nil {
		return err
	}
	defer os.Remove(layerPath)
	layer, err := os.ReadFile(layerPath)
	if err != nil {
		return err
	}
	digest := func(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }
	config, _ := json.Marshal(map[string]any{"architecture": runtime.GOARCH, "os": "linux",
		"config": map[string]any{"Cmd": []string{"/bin/sleep", "2147483647"}, "Env": []string{"PATH=/bin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest(layer)}}})
	manifest, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(config), "size": len(config)},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digest(layer), "size": len(layer)}}})
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{map[string]any{
		"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(manifest), "size": len(manifest),
		"platform":    map[string]string{"architecture": runtime.GOARCH, "os": "linux"},
		"annotations": map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": "1"}}}})
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := tar.NewWriter(f)
	put := func(name string, b []byte) error {
		if err := w.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b))}); err != nil {
			return err
		}
		_, err := w.Write(b)
		return err
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := w.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			return err
		}
	}
	for _, b := range [][]byte{layer, config, manifest} {
		if err := put("blobs/sha256/"+strings.TrimPrefix(digest(b), "sha256:"), b); err != nil {
			return err
		}
	}
	if err := put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := put("index.json", index); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}

// cloudpodsPod is a pod as Cloudpods' host agent creates one
// (pkg/hostman/guestman/pod.go, _startPod and createContainer): the
// sandbox's metadata (name the server's, uid its id, namespace its
// project), its label io.yunion.pod.uid, cgroup parent /cloudpods,
// namespaces (IPC and network per pod, PID per container), seccomp and
// AppArmor unconfined; each container's labels and annotation, and what
// its MPS device gives it (nvidia_mps.go, GetContainerExtraConfigures):
// CUDA_MPS_PIPE_DIRECTORY, NVIDIA_VISIBLE_DEVICES and
// NVIDIA_DRIVER_CAPABILITIES, /dev/shm and the pipe root bound read-write.
type cloudpodsPod struct {
	c                     *containerd
	id, server, name      string
	sandboxConf, pipeRoot string
	gpu                   string
}

// runPod starts the sandbox of server (named name) whose containers get
// the MPS device of gpu through pipeRoot.
func (c *containerd) runPod(server, name, gpu, pipeRoot string) *cloudpodsPod {
	c.t.Helper()
	p := &cloudpodsPod{c: c, server: server, name: name, pipeRoot: pipeRoot, gpu: gpu, sandboxConf: filepath.Join(c.dir, name+".pod.json")}
	logDir := filepath.Join(c.log, name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	// Cloudpods: IPC and network per pod, PID per container. The pods
	// here keep the host's network (NODE): Cloudpods' CNI gives a pod its
	// address, and CRI will not make a pod whose CNI gives it none (so no
	// hostname either: it needs a UTS namespace of the pod's own).
	ns := map[string]int{"ipc": 0, "network": 2, "pid": 1}
	unconfined := map[string]int{"profile_type": 1}
	writeJSON(c.t, p.sandboxConf, map[string]any{
		"metadata":      map[string]any{"name": name, "uid": server, "namespace": "project-e2e", "attempt": 1},
		"log_directory": logDir,
		"labels":        map[string]string{"io.yunion.pod.uid": server},
		"linux": map[string]any{"cgroup_parent": "/cloudpods", "security_context": map[string]any{
			"namespace_options": ns, "privileged": false, "seccomp": unconfined, "apparmor": unconfined}},
	})
	p.id = c.crictl("runp", p.sandboxConf)
	return p
}

// container creates and starts a container of the pod running command,
// with extra environment entries; it returns its id.
func (p *cloudpodsPod) container(name string, command []string, env ...string) string {
	p.c.t.Helper()
	envs := []map[string]string{{"key": "CUDA_MPS_PIPE_DIRECTORY", "value": p.pipeRoot},
		{"key": "NVIDIA_VISIBLE_DEVICES", "value": p.gpu}, {"key": "NVIDIA_DRIVER_CAPABILITIES", "value": "all"}}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		envs = append([]map[string]string{{"key": k, "value": v}}, envs...)
	}
	unconfined := map[string]int{"profile_type": 1}
	ns := map[string]int{"ipc": 0, "network": 2, "pid": 1} // the pod's (runPod)
	conf := filepath.Join(p.c.dir, p.name+"-"+name+".ctr.json")
	writeJSON(p.c.t, conf, map[string]any{
		"metadata": map[string]any{"name": name, "attempt": 0},
		"labels": map[string]string{"io.yunion.pod.name": p.name, "io.yunion.pod.uid": p.server,
			"io.yunion.container.name": name, "io.yunion.container.restart_count": "0"},
		"annotations": map[string]string{"io.yunion.container.restart_count": "0"},
		"image":       map[string]string{"image": busyboxImage},
		"command":     command,
		"log_path":    name + ".log",
		"envs":        envs,
		"mounts": []map[string]any{{"container_path": "/dev/shm", "host_path": "/dev/shm"},
			{"container_path": p.pipeRoot, "host_path": p.pipeRoot}},
		"linux": map[string]any{"security_context": map[string]any{"capabilities": map[string]any{},
			"namespace_options": ns, "no_new_privs": true,
			"seccomp": unconfined, "apparmor": unconfined}},
	})
	id := p.c.crictl("create", p.id, conf, p.sandboxConf)
	p.c.crictl("start", id)
	return id
}

// logOf is what a container printed (CRI's log lines, their text alone).
func (p *cloudpodsPod) logOf(name string) string {
	b, _ := os.ReadFile(filepath.Join(p.c.log, p.name, name+".log"))
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		// "<time> <stream> <tag> <text>"
		if f := strings.SplitN(l, " ", 4); len(f) == 4 {
			out = append(out, f[3])
		}
	}
	return strings.Join(out, "\n")
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// pidOf is the host PID of the process of container id whose command
// line is cmdline (NUL-separated arguments joined by spaces), found by
// its cgroup as the daemon finds it.
func pidOf(t *testing.T, ctr, cmdline string) int {
	t.Helper()
	pid := 0
	eventually(t, "the process "+cmdline+" of container "+ctr[:12], func() (bool, string) {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			n, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			cg, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
			if !bytes.Contains(cg, []byte("/cloudpods/"+ctr)) {
				continue
			}
			cl, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if strings.TrimSpace(strings.ReplaceAll(string(cl), "\x00", " ")) == cmdline {
				pid = n
				return true, ""
			}
		}
		return false, "not found"
	})
	return pid
}
