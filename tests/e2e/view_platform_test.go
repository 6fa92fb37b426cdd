package e2e

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/vdev"
	"yunion.io/x/mps-daemon/pkg/view"
)

// TestViewPlatformsStartWithoutALoaderError: the preload list names the
// library through $PLATFORM and the platform directory the daemon writes
// (pkg/view). Laid out as a container has them (the library at
// /run/yunion-mps/lib, the directory at /run/yunion-mps/lib/p, here under a
// temporary directory), a program of each platform starts with that name
// preloaded: a native one loads the library; a 32-bit x86 one (the cross
// glibc's loader), a 32-bit Arm one and an arm64 one (qemu-user) load
// their stub and print nothing but their own output: no "ERROR: ld.so:
// ... cannot be preloaded" line. The control: the library named directly,
// as before, gives the 32-bit program that line.
func TestViewPlatformsStartWithoutALoaderError(t *testing.T) {
	kit := buildViewKit(t)
	root := t.TempDir()
	lib := filepath.Join(root, "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, kit.Library, filepath.Join(lib, view.LibraryFile))
	store := view.Store{Dir: filepath.Join(root, "state", "view")}
	if _, err := view.NewWriter(store, t.TempDir()).Sync(func(vdev.Name) bool { return false }, nil); err != nil {
		t.Fatal(err)
	}
	copyTree(t, store.PlatformsPath(), filepath.Join(lib, "p"))
	preload := filepath.Join(lib, "p", "$PLATFORM", view.LibraryFile)

	hello := filepath.Join(t.TempDir(), "hello.c")
	if err := os.WriteFile(hello, []byte("#include <stdio.h>\nint main(void) { puts(\"hello\"); return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	type platform struct {
		name, cc string
		run      func(prog string) []string // the command line that runs prog
	}
	qemu := func(q, sysroot string) func(string) []string {
		// qemu-user hands its environment, LD_PRELOAD too, to the program.
		return func(p string) []string { return []string{q, "-L", sysroot, p} }
	}
	native := func(p string) []string { return []string{p} }
	i686 := func(p string) []string {
		return []string{"/usr/i686-linux-gnu/lib/ld-linux.so.2", "--library-path", "/usr/i686-linux-gnu/lib", p}
	}
	plats := []platform{
		{"native", "gcc", native},
		{"32-bit x86", "i686-linux-gnu-gcc", i686},
		{"32-bit Arm (qemu-arm)", "arm-linux-gnueabihf-gcc", qemu("qemu-arm-static", "/usr/arm-linux-gnueabihf")},
	}
	if strings.HasPrefix(runtimeArch(t), "x86_64") {
		plats = append(plats, platform{"arm64 (qemu-aarch64)", "aarch64-linux-gnu-gcc", qemu("qemu-aarch64-static", "/usr/aarch64-linux-gnu")})
	}
	for _, p := range plats {
		t.Run(p.name, func(t *testing.T) {
			prog := filepath.Join(t.TempDir(), "hello")
			argv := p.run(prog)
			tools := []string{p.cc}
			if argv[0] != prog {
				tools = append(tools, argv[0])
			}
			for _, tool := range tools {
				if _, err := exec.LookPath(tool); err != nil {
					if os.Getenv("CI") == "true" {
						t.Fatalf("%s: %v (.ci/run installs it)", tool, err)
					}
					t.Skipf("%s: %v", tool, err)
				}
			}
			if out, err := exec.Command(p.cc, "-O2", "-o", prog, hello).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", p.cc, err, out)
			}
			stdout, stderr := runPreloaded(t, argv, preload)
			if stdout != "hello\n" || stderr != "" {
				t.Errorf("with the platform directory: stdout %q, stderr %q; want hello and nothing on stderr", stdout, stderr)
			}
			if p.name == "native" {
				// The library itself, not a stub: its name in the map.
				stdout, _ = runPreloaded(t, []string{"sh", "-c", "cat /proc/$$/maps"}, preload)
				if !strings.Contains(stdout, filepath.Join(lib, view.LibraryFile)+"\n") {
					t.Errorf("the native program did not load the library:\n%s", stdout)
				}
			}
			if p.name == "32-bit x86" {
				_, stderr = runPreloaded(t, argv, filepath.Join(lib, view.LibraryFile))
				if !strings.Contains(stderr, "wrong ELF class") {
					t.Errorf("control: the library named directly should give the loader's error, got %q", stderr)
				}
			}
		})
	}
}

// runPreloaded runs argv with LD_PRELOAD=preload (the loader expands
// $PLATFORM in it as in /etc/ld.so.preload); its stdout and stderr.
func runPreloaded(t *testing.T, argv []string, preload string) (string, string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LD_PRELOAD=" + preload}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Errorf("%v: %v\n%s", argv, err, errb.String())
	}
	return out.String(), errb.String()
}

func runtimeArch(t *testing.T) string {
	out, err := exec.Command("uname", "-m").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyTree copies a directory of directories, files and links, the links
// as they are (a relative link resolves where the copy is, as in a
// container that has the directory mounted).
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, dst)
		case d.IsDir():
			return os.MkdirAll(dst, 0o755)
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(dst, b, 0o444)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}
