package accounting

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// fakeProc is a /proc tree in a temporary directory.
type fakeProc struct {
	t    *testing.T
	root string
}

func newFakeProc(t *testing.T) *fakeProc {
	return &fakeProc{t: t, root: t.TempDir()}
}

// statLine is a /proc/<pid>/stat line with state and start time (field 22);
// the command name holds a space and a parenthesis, as names may.
func statLine(pid int, state byte, start uint64) string {
	fields := []string{strconv.Itoa(pid), "(py thon) x)", string(state)}
	for range 18 { // fields 4..21
		fields = append(fields, "0")
	}
	fields = append(fields, strconv.FormatUint(start, 10), "123456", "789")
	return strings.Join(fields, " ") + "\n"
}

// add makes a process started at start whose environment names device
// ("" names none).
func (f *fakeProc) add(pid int, start uint64, device string) {
	f.t.Helper()
	entries := []string{"PATH=/usr/bin", "CUDA_MPS_PIPE_DIRECTORY=/run/yunion-mps/" + gpuA}
	if device != "" {
		entries = append(entries, vdev.EnvVar+"="+device)
	}
	f.write(pid, "environ", env(entries...))
	f.write(pid, "stat", []byte(statLine(pid, 'S', start)))
	f.write(pid, "cgroup", []byte(fmt.Sprintf("0::/system.slice/container-%d.scope\n", pid)))
}

func (f *fakeProc) write(pid int, file string, b []byte) {
	f.t.Helper()
	dir := filepath.Join(f.root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), b, 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// exit makes the process vanish, as the kernel removes /proc/<pid>.
func (f *fakeProc) exit(pid int) {
	f.t.Helper()
	if err := os.RemoveAll(filepath.Join(f.root, strconv.Itoa(pid))); err != nil {
		f.t.Fatal(err)
	}
}

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stat  string
		state byte
		start uint64
		bad   bool
	}{
		{"odd command name", statLine(981, 'S', 4242), 'S', 4242, false},
		{"zombie", statLine(7, 'Z', 1), 'Z', 1, false},
		{"real line", "1066 (nvidia-cuda-mps) S 1 1066 1066 0 -1 4194624 1024 0 0 0 12 8 0 0 20 0 3 0 98765 1234567 890 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 3 0 0 0 0 0\n", 'S', 98765, false},
		{"no parenthesis", "1066 nvidia S 1", 0, 0, true},
		{"too short", "1066 (x) S 1 2 3", 0, 0, true},
		{"start not a number", strings.Replace(statLine(1, 'S', 5), " 5 ", " five ", 1), 0, 0, true},
		{"empty", "", 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state, start, err := ParseStat([]byte(tc.stat))
			if tc.bad {
				if err == nil {
					t.Fatalf("ParseStat(%q) = %c, %d; want an error", tc.stat, state, start)
				}
				return
			}
			if err != nil || state != tc.state || start != tc.start {
				t.Errorf("ParseStat = %c, %d, %v; want %c, %d", state, start, err, tc.state, tc.start)
			}
		})
	}
}

func TestMapperLookup(t *testing.T) {
	p := newFakeProc(t)
	p.add(100, 5000, gpuA+"::1")
	p.add(101, 5001, "")
	p.write(102, "stat", []byte(statLine(102, 'Z', 5002)))
	p.write(103, "stat", []byte(statLine(103, 'S', 5003)))
	if err := os.WriteFile(filepath.Join(p.root, "103", "environ"), nil, 0o000); err != nil {
		t.Fatal(err)
	}
	m := Mapper{ProcRoot: p.root}

	id, err := m.Lookup(100)
	if want := (Identity{Device: gpuA + "::1", Source: "environ", StartTicks: 5000}); err != nil || id != want {
		t.Errorf("Lookup(100) = %+v, %v; want %+v", id, err, want)
	}
	if id, err := m.Lookup(101); !errors.Is(err, ErrNoDevice) || id.Device != "" || id.StartTicks != 5001 {
		t.Errorf("Lookup(101) = %+v, %v; want ErrNoDevice with the start time", id, err)
	}
	if _, err := m.Lookup(102); !errors.Is(err, ErrExited) {
		t.Errorf("Lookup of a zombie = %v, want ErrExited", err)
	}
	if _, err := m.Lookup(999); !errors.Is(err, ErrExited) {
		t.Errorf("Lookup of a missing PID = %v, want ErrExited", err)
	}
	if os.Geteuid() != 0 { // root reads a 0000 file anyway
		if _, err := m.Lookup(103); err == nil || errors.Is(err, ErrNoDevice) || errors.Is(err, ErrExited) {
			t.Errorf("Lookup of an unreadable environ = %v, want a read error", err)
		}
	}

	// The cgroup hook wins where it names a device; elsewhere environ holds.
	m.Cgroup = func(cg []byte) (string, bool) {
		if strings.Contains(string(cg), "container-101.scope") {
			return gpuB + "::0", true
		}
		if strings.Contains(string(cg), "container-100.scope") {
			return gpuB + "::2", true
		}
		return "", false
	}
	p.add(104, 5004, gpuA+"::0")
	for pid, want := range map[int]Identity{
		100: {Device: gpuB + "::2", Source: "cgroup", StartTicks: 5000},
		101: {Device: gpuB + "::0", Source: "cgroup", StartTicks: 5001},
		104: {Device: gpuA + "::0", Source: "environ", StartTicks: 5004},
	} {
		if id, err := m.Lookup(pid); err != nil || id != want {
			t.Errorf("with cgroups: Lookup(%d) = %+v, %v; want %+v", pid, id, err, want)
		}
	}
}

func TestAccount(t *testing.T) {
	p := newFakeProc(t)
	p.add(10, 100, gpuA+"::0") // two processes of device A::0
	p.add(11, 200, gpuA+"::0")
	p.add(12, 300, gpuA+"::1") // one of device A::1
	p.add(20, 400, gpuB+"::0") // one of B::0, on B
	p.add(13, 500, "")         // names nothing
	p.add(14, 600, gpuB+"::1") // on A, naming a device of B
	p.add(15, 700, gpuA+"::9") // a device A does not have
	// 16 is listed by NVML but gone from /proc.
	caps := map[string]uint64{
		gpuA + "::0": 8 << 30, gpuA + "::1": 8 << 30, gpuA + "::2": 8 << 30,
		gpuB + "::0": 8 << 30, gpuB + "::1": 8 << 30,
	}
	procs := map[string][]gpu.Process{
		gpuA: {{PID: 10, UsedMemoryBytes: 3 << 30}, {PID: 11, UsedMemoryBytes: 2 << 30}, {PID: 12, UsedMemoryBytes: 1 << 30},
			{PID: 13, UsedMemoryBytes: 5}, {PID: 14, UsedMemoryBytes: 6}, {PID: 15, UsedMemoryBytes: 7}, {PID: 16, UsedMemoryBytes: 8}},
		gpuB: {{PID: 20, UsedMemoryBytes: 4 << 30}},
	}
	u := Account(procs, caps, Mapper{ProcRoot: p.root}.Lookup)

	want := map[string]DeviceUsage{
		gpuA + "::0": {GPU: gpuA, UsedBytes: 5 << 30, PIDs: []int{10, 11},
			Clients: []Client{{PID: 10, UsedBytes: 3 << 30, StartTicks: 100}, {PID: 11, UsedBytes: 2 << 30, StartTicks: 200}}},
		gpuA + "::1": {GPU: gpuA, UsedBytes: 1 << 30, PIDs: []int{12}, Clients: []Client{{PID: 12, UsedBytes: 1 << 30, StartTicks: 300}}},
		gpuA + "::2": {GPU: gpuA, PIDs: []int{}, Clients: nil},
		gpuB + "::0": {GPU: gpuB, UsedBytes: 4 << 30, PIDs: []int{20}, Clients: []Client{{PID: 20, UsedBytes: 4 << 30, StartTicks: 400}}},
		gpuB + "::1": {GPU: gpuB, PIDs: []int{}},
	}
	if !reflect.DeepEqual(u.PerDevice, want) {
		t.Errorf("PerDevice =\n%+v\nwant\n%+v", u.PerDevice, want)
	}
	wantUnknown := []struct {
		pid    int
		reason string
	}{
		{13, "names no virtual device"},
		{14, "a device of GPU " + gpuB},
		{15, "which this host does not have"},
		{16, "exited"},
	}
	if len(u.Unknown) != len(wantUnknown) {
		t.Fatalf("Unknown = %+v, want PIDs 13-16", u.Unknown)
	}
	for i, w := range wantUnknown {
		got := u.Unknown[i]
		if got.PID != w.pid || got.GPU != gpuA || !strings.Contains(got.Reason, w.reason) {
			t.Errorf("Unknown[%d] = %+v, want PID %d on %s, reason with %q", i, got, w.pid, gpuA, w.reason)
		}
	}

	// A GPU that was not sampled has no devices in the usage: not measured.
	u = Account(map[string][]gpu.Process{gpuB: nil}, caps, Mapper{ProcRoot: p.root}.Lookup)
	if _, ok := u.PerDevice[gpuA+"::0"]; ok || len(u.PerDevice) != 2 {
		t.Errorf("with only %s sampled, PerDevice = %v", gpuB, u.PerDevice)
	}
}
