package accounting

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
)

const viewLib = "libyunion-mps-view.so"

// mapsWith is a /proc/<pid>/maps with libc and, when lib is set, lib at
// path.
func mapsWith(lib string) []byte {
	s := "55d0c0a00000-55d0c0a28000 r--p 00000000 08:01 1048 /usr/bin/python3.12\n" +
		"7f1a2b000000-7f1a2b028000 r--p 00000000 08:01 2091 /usr/lib/x86_64-linux-gnu/libc.so.6\n" +
		"7f1a2c000000-7f1a2c200000 rw-s 00000000 00:01 77 /dev/zero (deleted)\n"
	if lib != "" {
		s += "7f1a2d000000-7f1a2d004000 r-xp 00001000 00:2e 3 " + lib + "\n"
	}
	return []byte(s + "7ffd1e000000-7ffd1e021000 rw-p 00000000 00:00 0 [stack]\n")
}

func TestScanMaps(t *testing.T) {
	for _, tc := range []struct {
		name string
		maps []byte
		want bool
	}{
		{"preloaded in a container", mapsWith("/run/yunion-mps/lib/" + viewLib), true},
		{"its file replaced on the host", mapsWith("/run/yunion-mps/lib/" + viewLib + " (deleted)"), true},
		{"none", mapsWith(""), false},
		{"a longer name", mapsWith("/opt/x/not-" + viewLib), false},
		{"a file of that name's directory", mapsWith("/opt/" + viewLib + "/x.so"), false},
		{"no trailing newline", bytes.TrimSuffix(mapsWith("/l/" + viewLib)[:bytes.Index(mapsWith("/l/"+viewLib), []byte("7ffd"))], []byte("\n")), true},
		{"after a line longer than the buffer", append([]byte("1-2 r--p 0 0:0 1 /"+strings.Repeat("d", mapsBufSize*2)+"\n"), mapsWith("/l/"+viewLib)...), true},
		{"the name only in a line longer than the buffer", []byte("1-2 r--p 0 0:0 1 /" + strings.Repeat("d", mapsBufSize*2) + "/" + viewLib + "\n"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := scanMaps(bytes.NewReader(tc.maps), viewLib)
			if err != nil || got != tc.want {
				t.Errorf("scanMaps = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	huge := bytes.NewReader(bytes.Repeat([]byte("1-2 r--p 0 0:0 1 /x\n"), maxMapsRead/19))
	if _, err := scanMaps(huge, viewLib); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a map past the bound: %v", err)
	}
}

// A real process's map: this test's own, with a file of the library's
// name mapped and then unmapped.
func TestHasMappingOnRealProc(t *testing.T) {
	m := &Mapper{}
	self := os.Getpid()
	start, err := m.StartTicks(self)
	if err != nil {
		t.Fatal(err)
	}
	if has, err := m.HasMapping(self, start, viewLib); err != nil || has {
		t.Fatalf("before mapping: %v, %v", has, err)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), viewLib))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(4096); err != nil {
		t.Fatal(err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	if has, err := m.HasMapping(self, start, viewLib); err != nil || !has {
		t.Errorf("mapped: %v, %v", has, err)
	}
	if _, err := m.HasMapping(self, start+1, viewLib); err == nil {
		t.Error("another start time answered as this process")
	}
	if err := syscall.Munmap(mem); err != nil {
		t.Fatal(err)
	}
	if has, err := m.HasMapping(self, start, viewLib); err != nil || has {
		t.Errorf("unmapped: %v, %v", has, err)
	}
}

// The accountant reports, per device, the clients whose map shows no view
// library, checks each process once, never terminates one for it, and
// checks none while containers get no view.
func TestAccountantReportsClientsWithoutTheView(t *testing.T) {
	proc := newFakeProc(t)
	var logs bytes.Buffer
	acct := New(Options{ProcRoot: proc.root, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	a0, a1 := gpuA+"::0", gpuA+"::1"
	caps := map[string]uint64{a0: 8 * gib, a1: 8 * gib}
	proc.add(10, 100, a0)
	proc.write(10, "maps", mapsWith("/run/yunion-mps/lib/"+viewLib))
	proc.add(11, 110, a0)
	proc.write(11, "maps", mapsWith(""))
	proc.add(20, 200, a1)
	proc.write(20, "maps", mapsWith("/run/yunion-mps/lib/"+viewLib))
	proc.add(21, 210, a1)
	if err := os.Mkdir(filepath.Join(proc.root, "21", "maps"), 0o755); err != nil { // unreadable
		t.Fatal(err)
	}
	sample := map[gpu.UUID][]gpu.Process{gpuA: {{PID: 10, UsedMemoryBytes: gib}, {PID: 11, UsedMemoryBytes: 2 * gib}, {PID: 20, UsedMemoryBytes: gib}, {PID: 21, UsedMemoryBytes: gib}}}

	r := acct.Tick(t.Context(), config.AccountingEnforce, sample, caps, nil, nil)
	if len(r.Usage.WithoutView) != 0 {
		t.Fatalf("checked while containers get no view: %+v", r.Usage.WithoutView)
	}
	acct.SetViewLibrary(viewLib)
	r = acct.Tick(t.Context(), config.AccountingEnforce, sample, caps, nil, nil)
	w := r.Usage.WithoutView
	if len(w) != 2 || w[0].PID != 11 || w[0].Device != a0 || !strings.Contains(w[0].Reason, "whole GPU") || uint64(w[0].UsedBytes) != 2*gib ||
		w[1].PID != 21 || !strings.Contains(w[1].Reason, "could not be read") {
		t.Fatalf("without the view: %+v", w)
	}
	if d := r.Usage.PerDevice[a0]; d.WithoutView != 1 || !d.Clients[1].WithoutView || d.Clients[0].WithoutView {
		t.Errorf("%s: %+v; want its second client without the view", a0, d)
	}
	if d := r.Usage.PerDevice[a1]; d.WithoutView != 0 {
		t.Errorf("%s: %d without the view; an unreadable map is not counted as one", a1, d.WithoutView)
	}
	if len(r.Steps) != 0 || len(r.Decision.Actions) != 0 {
		t.Errorf("a client without the view was acted on: %+v", r.Decision.Actions)
	}
	if n := strings.Count(logs.String(), "sees the whole GPU"); n != 2 {
		t.Errorf("logged %d times, want once per client:\n%s", n, logs.String())
	}
	// Each process's map is read once: a changed file is not read again,
	// a new process of the same PID is.
	proc.write(11, "maps", mapsWith("/l/"+viewLib))
	if err := os.Remove(filepath.Join(proc.root, "21", "maps")); err != nil {
		t.Fatal(err)
	}
	proc.write(21, "maps", mapsWith("/l/"+viewLib))
	r = acct.Tick(t.Context(), config.AccountingEnforce, sample, caps, nil, nil)
	if len(r.Usage.WithoutView) != 1 || r.Usage.WithoutView[0].PID != 11 {
		t.Errorf("the second tick: %+v; want 11 as it was, 21 read again (its map had not been read)", r.Usage.WithoutView)
	}
	if n := strings.Count(logs.String(), "sees the whole GPU"); n != 2 {
		t.Errorf("logged again:\n%s", logs.String())
	}
	proc.exit(11)
	proc.add(11, 999, a0)
	proc.write(11, "maps", mapsWith("/l/"+viewLib))
	r = acct.Tick(t.Context(), config.AccountingEnforce, sample, caps, nil, nil)
	if len(r.Usage.WithoutView) != 0 || r.Usage.PerDevice[a0].WithoutView != 0 {
		t.Errorf("a new process of PID 11 with the view: %+v", r.Usage.WithoutView)
	}
	acct.SetViewLibrary("")
	proc.write(11, "maps", mapsWith(""))
	if r := acct.Tick(t.Context(), config.AccountingEnforce, sample, caps, nil, nil); len(r.Usage.WithoutView) != 0 {
		t.Errorf("the view off: %+v", r.Usage.WithoutView)
	}
}
