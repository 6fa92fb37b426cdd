package e2e

import (
	"archive/tar"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// viewKit is what a container of a device with the view is tested with:
// the view library as `make tenant` builds it for this machine, and the
// project's stand-ins for libcuda.so.1 and libnvidia-ml.so.1 with the
// programs that ask them how much memory the GPU has, each way real
// software does (tenant/test: viewtest linked, dlsym, procaddr; Python's
// ctypes), and libown.so, an image's own preload library.
type viewKit struct {
	// lib is libyunion-mps-view.so: host.conf's mps_view_library.
	lib string
	// tools holds the stand-ins and the programs, mounted at /opt/t.
	tools string
}

var (
	viewKitOnce sync.Once
	viewKitDir  string
	viewKitErr  error
)

// buildViewKit builds the kit once per test binary (the binaries' own
// temporary directory holds it), with make and the C compiler the
// Makefile names for this architecture; the stand-ins and programs with
// cc. A machine without them skips the test, or fails it under
// MPS_REQUIRE_PODMAN=1.
func buildViewKit(t *testing.T) viewKit {
	t.Helper()
	viewKitOnce.Do(func() { viewKitDir, viewKitErr = makeViewKit() })
	if viewKitErr != nil {
		if os.Getenv("MPS_REQUIRE_PODMAN") == "1" {
			t.Fatal(viewKitErr)
		}
		t.Skip(viewKitErr)
	}
	return viewKit{lib: filepath.Join(viewKitDir, "lib", "libyunion-mps-view.so"), tools: filepath.Join(viewKitDir, "t")}
}

func makeViewKit() (string, error) {
	for _, tool := range []string{"make", "cc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("the view's tests need %s: %w", tool, err)
		}
	}
	dir := filepath.Join(binDir, "viewkit")
	repo, err := filepath.Abs("../..")
	if err != nil {
		return "", err
	}
	src := filepath.Join(repo, "tenant", "test")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t := filepath.Join(dir, "t")
	steps := [][]string{
		{"make", "-C", repo, "--no-print-directory", "tenant", "ARCH=" + runtime.GOARCH, "BIN=" + filepath.Join(dir, "lib")},
		{"mkdir", "-p", t},
		{"cc", "-O2", "-fPIC", "-shared", "-o", t + "/libcuda.so.1", "-Wl,-soname,libcuda.so.1", src + "/fakecuda.c", "-lpthread"},
		{"cc", "-O2", "-fPIC", "-shared", "-o", t + "/libnvidia-ml.so.1", "-Wl,-soname,libnvidia-ml.so.1", src + "/fakenvml.c", "-lpthread"},
		{"cc", "-O2", "-o", t + "/viewtest", src + "/viewtest.c", "-ldl", "-lpthread", "-Wl,-rpath,$ORIGIN"},
		{"cc", "-O2", "-DLINKED", "-o", t + "/viewtest-linked", src + "/viewtest.c", "-L" + t, "-Wl,--no-as-needed",
			"-l:libcuda.so.1", "-l:libnvidia-ml.so.1", "-ldl", "-lpthread", "-Wl,-rpath,$ORIGIN"},
		{"cc", "-O2", "-fPIC", "-shared", "-o", t + "/libown.so", src + "/own.c", "-ldl"},
		{"cp", src + "/ctypes_check.py", t + "/"},
	}
	for _, s := range steps {
		cmd := exec.CommandContext(ctx, s[0], s[1:]...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("building the view's test kit: %s: %v\n%s", strings.Join(s, " "), err, out)
		}
	}
	return dir, nil
}

// glibcImage imports an image whose programs are the host's: its /bin,
// /lib and /lib64 are links into /usr, which the container gets from the
// host read-only (-v /usr:/usr:ro); the host's /etc/ld.so.cache; and its
// own /etc/ld.so.preload naming /opt/t/libown.so, which the view's preload
// list hides.
func (p *podman) glibcImage() string {
	p.t.Helper()
	tarball := filepath.Join(p.t.TempDir(), "rootfs.tar")
	f, err := os.Create(tarball)
	if err != nil {
		p.t.Fatal(err)
	}
	w := tar.NewWriter(f)
	for _, d := range []string{"dev", "proc", "sys", "run", "tmp", "etc", "opt", "usr"} {
		if err := w.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			p.t.Fatal(err)
		}
	}
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		if err := w.WriteHeader(&tar.Header{Name: l, Typeflag: tar.TypeSymlink, Linkname: "usr/" + l, Mode: 0o777}); err != nil {
			p.t.Fatal(err)
		}
	}
	cache, err := os.ReadFile("/etc/ld.so.cache")
	if err != nil {
		p.t.Fatal(err)
	}
	for name, data := range map[string][]byte{"etc/ld.so.cache": cache, "etc/ld.so.preload": []byte("/opt/t/libown.so\n")} {
		if err := w.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))}); err != nil {
			p.t.Fatal(err)
		}
		if _, err := w.Write(data); err != nil {
			p.t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		p.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		p.t.Fatal(err)
	}
	name := fmt.Sprintf("localhost/mps-e2e-glibc:%d", time.Now().UnixNano())
	p.run("import", tarball, name)
	return name
}

// viewAnswer is one line viewtest prints: "cuda|nvml <i> <uuid> <way>
// key=value...".
type viewAnswer struct {
	api, uuid, way string
	v              map[string]uint64
}

// parseViewAnswers reads viewtest's (and ctypes_check.py's) lines; any
// "error" line fails t.
func parseViewAnswers(t *testing.T, out string) []viewAnswer {
	t.Helper()
	var as []viewAnswer
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "error" {
			t.Errorf("viewtest: %s", line)
		}
		if len(f) < 5 || (f[0] != "cuda" && f[0] != "nvml") {
			continue
		}
		a := viewAnswer{api: f[0], uuid: f[2], way: f[3], v: map[string]uint64{}}
		for _, kv := range f[4:] {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("viewtest printed %q", line)
			}
			a.v[k] = n
		}
		as = append(as, a)
	}
	return as
}
