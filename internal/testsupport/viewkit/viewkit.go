// Package viewkit is what tests run in a container of a device with the
// view (pkg/view, tenant/): the view library as `make tenant` builds it,
// the project's stand-ins for libcuda.so.1 and libnvidia-ml.so.1, the
// programs that ask them how much memory the GPU has, each way real
// software does (tenant/test: viewtest linked, dlsym, procaddr; Python's
// ctypes), libown.so (an image's own preload library), an image whose
// programs are the host's, and the reading of what the programs print.
// tests/e2e and tests/k8s use it with Podman.
package viewkit

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
)

// Kit is a built kit.
type Kit struct {
	// Library is libyunion-mps-view.so: host.conf's mps_view_library.
	Library string
	// Tools holds the stand-ins and the programs; containers get it at
	// ToolsMount (read-only).
	Tools string
}

// ToolsMount is where a container finds Kit.Tools.
const ToolsMount = "/opt/t"

// Build builds the kit into dir from the checkout at repo: the library
// with make (the Makefile's C compiler for this architecture and its
// glibc floor), the rest with cc. It needs make and cc.
func Build(ctx context.Context, repo, dir string) (Kit, error) {
	for _, tool := range []string{"make", "cc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return Kit{}, fmt.Errorf("the view's tests need %s: %w", tool, err)
		}
	}
	src := filepath.Join(repo, "tenant", "test")
	k := Kit{Library: filepath.Join(dir, "lib", "libyunion-mps-view.so"), Tools: filepath.Join(dir, "t")}
	t := k.Tools
	steps := [][]string{
		{"make", "-C", repo, "--no-print-directory", "tenant", "ARCH=" + runtime.GOARCH, "BIN=" + filepath.Dir(k.Library)},
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
		if out, err := exec.CommandContext(ctx, s[0], s[1:]...).CombinedOutput(); err != nil {
			return Kit{}, fmt.Errorf("building the view's test kit: %s: %v\n%s", strings.Join(s, " "), err, out)
		}
	}
	return k, nil
}

// GPUs writes the stand-ins' GPUs to path ("gpu <UUID> <total> <free>"
// lines); a container gets it at GPUsMount.
func GPUs(path string, gpus ...GPU) error {
	var b strings.Builder
	for _, g := range gpus {
		fmt.Fprintf(&b, "gpu %s %d %d\n", g.UUID, g.Total, g.Free)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// GPU is one of the stand-ins' GPUs: what the real driver would say.
type GPU struct {
	UUID        string
	Total, Free uint64
}

// GPUsMount is where the stand-ins read their GPUs (so that a process
// started with `env -i` finds them too).
const GPUsMount = "/run/yunion-mps-fake/gpus"

// Mounts are the podman arguments that give a container of the glibc
// image its programs, the kit and the stand-ins' GPUs.
func (k Kit) Mounts(gpusFile string) []string {
	return []string{"-v", "/usr:/usr:ro", "-v", k.Tools + ":" + ToolsMount + ":ro", "-v", gpusFile + ":" + GPUsMount + ":ro"}
}

// WriteGlibcRootfs writes an image's root file system whose programs are
// the host's: /bin, /sbin, /lib and /lib64 are links into /usr, which the
// container gets from the host read-only (Mounts); the host's
// /etc/ld.so.cache; and its own /etc/ld.so.preload naming libown.so,
// which the view's preload list hides.
func WriteGlibcRootfs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := tar.NewWriter(f)
	for _, d := range []string{"dev", "proc", "sys", "run", "tmp", "etc", "opt", "usr"} {
		if err := w.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			return err
		}
	}
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		if err := w.WriteHeader(&tar.Header{Name: l, Typeflag: tar.TypeSymlink, Linkname: "usr/" + l, Mode: 0o777}); err != nil {
			return err
		}
	}
	cache, err := os.ReadFile("/etc/ld.so.cache")
	if err != nil {
		return err
	}
	for _, file := range []struct {
		name string
		data []byte
	}{{"etc/ld.so.cache", cache}, {"etc/ld.so.preload", []byte(ToolsMount + "/libown.so\n")}} {
		if err := w.WriteHeader(&tar.Header{Name: file.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(file.data))}); err != nil {
			return err
		}
		if _, err := w.Write(file.data); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}

// Answer is one line viewtest (or ctypes_check.py) prints: "cuda|nvml <i>
// <uuid> <way> key=value...".
type Answer struct {
	API, UUID, Way string
	Values         map[string]uint64
}

// Parse reads the programs' answers; the "error" lines they print come
// back as errors.
func Parse(out string) ([]Answer, []string) {
	var as []Answer
	var errs []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "error" {
			errs = append(errs, line)
		}
		if len(f) < 5 || (f[0] != "cuda" && f[0] != "nvml") {
			continue
		}
		a := Answer{API: f[0], UUID: f[2], Way: f[3], Values: map[string]uint64{}}
		for _, kv := range f[4:] {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				errs = append(errs, "unreadable: "+line)
				continue
			}
			a.Values[k] = n
		}
		as = append(as, a)
	}
	return as, errs
}

// Want is what a GPU's answers must be: Total and Free; with the view,
// NVML's used is the rest and nothing is reserved.
type Want struct {
	UUID        string
	Total, Free uint64
	View        bool
}

// Check compares answers with want (answers about other GPUs are not
// looked at) and returns what differs, and the number of answers about
// want's GPU per way.
func Check(as []Answer, want Want) (problems []string, ways map[string]int) {
	ways = map[string]int{}
	for _, a := range as {
		if a.UUID != want.UUID {
			continue
		}
		ways[a.Way]++
		w := map[string]uint64{"total": want.Total, "free": want.Free}
		if a.API == "cuda" {
			w["totalmem"] = want.Total
		} else {
			w["v2.total"], w["v2.free"] = want.Total, want.Free
			if want.View {
				w["used"], w["v2.used"], w["v2.reserved"] = want.Total-want.Free, want.Total-want.Free, 0
			}
		}
		for k, v := range w {
			if a.Values[k] != v {
				problems = append(problems, fmt.Sprintf("%s %s: %s=%d, want %d (%d MiB)", a.API, a.Way, k, a.Values[k], v, v>>20))
			}
		}
	}
	return problems, ways
}
