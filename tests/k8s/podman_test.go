package k8s

import (
	"archive/tar"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// podman runs Debian's Podman on a throwaway store of its own, in a private
// mount namespace where the daemon's CDI directory is bind-mounted over
// /var/run/cdi (Podman 4.3 reads specs only there and in /etc/cdi): the
// spec it consumes is the daemon's file. tests/e2e/podman_test.go is the
// fuller version; this is the part a CDI name needs.
type podman struct {
	t      *testing.T
	global []string
	cdiDir string
}

// requirePodman skips where Podman cannot run containers (not root, a tool
// missing), or fails when MPS_REQUIRE_PODMAN=1, as in CI.
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
	if f, err := elf.Open(busybox); err != nil {
		missing = append(missing, "a static busybox (busybox-static): "+err.Error())
	} else {
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				missing = append(missing, "a static busybox (busybox-static)")
			}
		}
		f.Close()
	}
	if len(missing) == 0 {
		return busybox
	}
	msg := "the Kubernetes test needs " + strings.Join(missing, ", ")
	if os.Getenv("MPS_REQUIRE_PODMAN") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func newPodman(t *testing.T, cdiDir string) *podman {
	t.Helper()
	// Podman refuses a runroot path over 50 characters: a short root.
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
	if err := os.MkdirAll("/var/run/cdi", 0o755); err != nil {
		t.Fatal(err)
	}
	return &podman{t: t, cdiDir: cdiDir, global: []string{
		"--root", filepath.Join(store, "root"), "--runroot", filepath.Join(store, "runroot"),
		"--tmpdir", filepath.Join(store, "tmp"), "--storage-driver", "vfs",
		"--cgroup-manager", "cgroupfs", "--events-backend", "none",
	}}
}

func (p *podman) run(args ...string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.t.Context(), 2*time.Minute)
	defer cancel()
	full := append([]string{"--mount", "--propagation", "private", "sh", "-c",
		`mount --bind "$1" /var/run/cdi && shift && exec podman "$@"`, "sh", p.cdiDir}, p.global...)
	out, err := exec.CommandContext(ctx, "unshare", append(full, args...)...).CombinedOutput()
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
	name := fmt.Sprintf("localhost/mps-k8s-busybox:%d", time.Now().UnixNano())
	p.run("import", tarball, name)
	return name
}

func writeRootfs(path, busybox string) error {
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
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
	for _, a := range []string{"sh", "cat", "echo", "stat"} {
		if err := w.WriteHeader(&tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}
