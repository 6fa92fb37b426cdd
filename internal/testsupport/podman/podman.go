// Package podman runs Debian's Podman for the suites that hand a CDI name
// to a real container runtime (tests/e2e, tests/k8s), against a throwaway
// store of its own (vfs storage in a temporary directory, cgroupfs, no
// events), so nothing of the machine's images, containers or settings is
// used or changed. Podman reads CDI specs only from /etc/cdi and
// /var/run/cdi (4.3.1 has no setting for it), so every podman command runs
// in a private mount namespace where the daemon's CDI directory is
// bind-mounted over /var/run/cdi: the spec it consumes is the daemon's
// file, byte for byte, and no other process on the machine sees it.
package podman

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

// Podman is podman on a throwaway store, reading the CDI specs of one
// directory.
type Podman struct {
	t      testing.TB
	global []string
	cdiDir string
}

// Require skips the test where Podman cannot run containers here (not
// root, a tool missing), or fails it when MPS_REQUIRE_PODMAN=1 (.ci/run
// installs podman, runc and busybox-static). It answers the static busybox
// images are made of (Image).
func Require(t testing.TB) (busybox string) {
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
	if err := IsStatic(busybox); err != nil {
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

// IsStatic says why the executable at path is not statically linked (nil
// when it is): a static busybox runs in an image of its own alone.
func IsStatic(path string) error {
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

// New is podman on a store of its own, removed when the test ends,
// reading the CDI specs of cdiDir.
func New(t testing.TB, cdiDir string) *Podman {
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
	// The mount point: CDI's directory for generated specs. Created empty
	// when the machine has none (as a CDI runtime's host has); never written.
	if err := os.MkdirAll("/var/run/cdi", 0o755); err != nil {
		t.Fatal(err)
	}
	return &Podman{t: t, cdiDir: cdiDir, global: []string{
		"--root", filepath.Join(store, "root"), "--runroot", filepath.Join(store, "runroot"),
		"--tmpdir", filepath.Join(store, "tmp"), "--storage-driver", "vfs",
		"--cgroup-manager", "cgroupfs", "--events-backend", "none",
	}}
}

// Command is podman with args in the private mount namespace.
func (p *Podman) Command(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"--mount", "--propagation", "private", "sh", "-c",
		`mount --bind "$1" /var/run/cdi && shift && exec podman "$@"`, "sh", p.cdiDir}, p.global...)
	return exec.CommandContext(ctx, "unshare", append(full, args...)...)
}

// Run runs podman with args, within two minutes, and answers its output;
// a failure fails the test.
func (p *Podman) Run(args ...string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := p.Command(ctx, args...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Image imports a one-layer image of the static busybox, no registry, and
// answers its name.
func (p *Podman) Image(busybox string) string {
	p.t.Helper()
	return p.Import("busybox", func(tarball string) error { return WriteRootfs(tarball, busybox) })
}

// Import imports the one-layer image whose root file system write writes
// as a tarball (viewkit.WriteGlibcRootfs, WriteRootfs), named for what,
// and answers its name.
func (p *Podman) Import(what string, write func(tarball string) error) string {
	p.t.Helper()
	tarball := filepath.Join(p.t.TempDir(), "rootfs.tar")
	if err := write(tarball); err != nil {
		p.t.Fatal(err)
	}
	name := fmt.Sprintf("localhost/mps-test-%s:%d", what, time.Now().UnixNano())
	p.Run("import", tarball, name)
	return name
}

// WriteRootfs writes a root file system holding busybox and its applets,
// as a tarball at path (an image's one layer).
func WriteRootfs(path, busybox string) error {
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
