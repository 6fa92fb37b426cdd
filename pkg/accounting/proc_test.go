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

	"yunion.io/x/mps-daemon/pkg/clientreport"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/identity"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// hostNS is the host's mount namespace in the fake trees (PID 1's).
const hostNS = "mnt:[4026531841]"

// fakeProc is a /proc tree in a temporary directory, with the host's
// identity files beside it and containers' root directories.
type fakeProc struct {
	t     testing.TB
	root  string
	store identity.Store
	ctrs  string            // containers' roots, one directory each
	ns    map[string]string // container -> its mount namespace
}

func newFakeProc(t testing.TB) *fakeProc {
	base := t.TempDir()
	f := &fakeProc{t: t, root: filepath.Join(base, "proc"), store: identity.Store{Dir: filepath.Join(base, "state", "identity")},
		ctrs: filepath.Join(base, "containers"), ns: map[string]string{}}
	f.link(1, "ns/mnt", hostNS)
	return f
}

// mapper reads the fake tree and the fake host's identity files.
func (f *fakeProc) mapper() *Mapper {
	m := &Mapper{ProcRoot: f.root, Identities: f.store.Table}
	if err := m.Refresh(); err != nil {
		f.t.Fatal(err)
	}
	return m
}

// statLine is a /proc/<pid>/stat line with state, parent (field 4) and
// start time (field 22); the command name holds a space and a parenthesis,
// as names may.
func statLine(pid, ppid int, state byte, start uint64) string {
	fields := []string{strconv.Itoa(pid), "(py thon) x)", string(state), strconv.Itoa(ppid)}
	for range 17 { // fields 5..21
		fields = append(fields, "0")
	}
	fields = append(fields, strconv.FormatUint(start, 10), "123456", "789")
	return strings.Join(fields, " ") + "\n"
}

// add makes a process on the host (the host's mount namespace, root "/")
// started at start whose environment names device ("" names none).
func (f *fakeProc) add(pid int, start uint64, device string) {
	f.t.Helper()
	f.process(pid, 1, start, device, fmt.Sprintf("0::/user.slice/session-%d.scope\n", pid), hostNS, "/")
}

// addContainer makes a process of container ctr, child of ppid, whose
// environment names device: the container's own mount namespace, cgroup
// and root directory.
func (f *fakeProc) addContainer(pid, ppid int, start uint64, ctr, device string) {
	f.t.Helper()
	root := filepath.Join(f.ctrs, ctr)
	if err := os.MkdirAll(root, 0o755); err != nil {
		f.t.Fatal(err)
	}
	f.process(pid, ppid, start, device, cgroupOf(ctr), f.mountNS(ctr), root)
}

// addChrooted makes a process of container ctr chroot()ed into below, a
// directory of the container.
func (f *fakeProc) addChrooted(pid, ppid int, start uint64, ctr, device, below string) {
	f.t.Helper()
	root := filepath.Join(f.ctrs, ctr, below)
	if err := os.MkdirAll(root, 0o755); err != nil {
		f.t.Fatal(err)
	}
	f.process(pid, ppid, start, device, cgroupOf(ctr), f.mountNS(ctr), root)
}

// addHidden makes a process of container ctr that moved to a mount
// namespace and root of its own where the identity file is not (unshare,
// pivot_root): only its cgroup still says where it belongs.
func (f *fakeProc) addHidden(pid, ppid int, start uint64, ctr, device string) {
	f.t.Helper()
	f.process(pid, ppid, start, device, cgroupOf(ctr), f.mountNS("hidden-"+strconv.Itoa(pid)), f.t.TempDir())
}

func cgroupOf(ctr string) string { return "0::/machine.slice/libpod-" + ctr + ".scope\n" }

func (f *fakeProc) mountNS(ctr string) string {
	if _, ok := f.ns[ctr]; !ok {
		f.ns[ctr] = fmt.Sprintf("mnt:[%d]", 4026532000+len(f.ns))
	}
	return f.ns[ctr]
}

func (f *fakeProc) process(pid, ppid int, start uint64, device, cgroup, ns, root string) {
	f.t.Helper()
	entries := []string{"PATH=/usr/bin", "CUDA_MPS_PIPE_DIRECTORY=/run/yunion-mps/" + gpuA}
	if device != "" {
		entries = append(entries, vdev.EnvVar+"="+device)
	}
	f.write(pid, "environ", env(entries...))
	f.write(pid, "stat", []byte(statLine(pid, ppid, 'S', start)))
	f.write(pid, "cgroup", []byte(cgroup))
	f.link(pid, "ns/mnt", ns)
	f.link(pid, "root", root)
}

// give mounts device's identity file in container ctr, as the CDI spec
// does (a hard link gives the host file's inode a second path, as a bind
// mount does).
func (f *fakeProc) give(ctr, device string) {
	f.t.Helper()
	if err := f.store.Ensure([]vdev.Name{vdev.Name(device)}); err != nil {
		f.t.Fatal(err)
	}
	src, _ := f.store.Path(vdev.Name(device))
	uuid, _, _ := vdev.ParseName(device)
	dst := filepath.Join(f.ctrs, ctr, identity.ContainerPath(uuid))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Link(src, dst); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeProc) write(pid int, file string, b []byte) {
	f.t.Helper()
	p := filepath.Join(f.root, strconv.Itoa(pid), file)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeProc) link(pid int, file, target string) {
	f.t.Helper()
	p := filepath.Join(f.root, strconv.Itoa(pid), file)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	_ = os.Remove(p)
	if err := os.Symlink(target, p); err != nil {
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
		name string
		stat string
		want Stat
		bad  bool
	}{
		{"odd command name", statLine(981, 17, 'S', 4242), Stat{'S', 17, 4242}, false},
		{"zombie", statLine(7, 1, 'Z', 1), Stat{'Z', 1, 1}, false},
		{"real line", "1066 (nvidia-cuda-mps) S 1 1066 1066 0 -1 4194624 1024 0 0 0 12 8 0 0 20 0 3 0 98765 1234567 890 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 3 0 0 0 0 0\n", Stat{'S', 1, 98765}, false},
		{"no parenthesis", "1066 nvidia S 1", Stat{}, true},
		{"too short", "1066 (x) S 1 2 3", Stat{}, true},
		{"start not a number", strings.Replace(statLine(1, 0, 'S', 5), " 5 ", " five ", 1), Stat{}, true},
		{"parent not a number", strings.Replace(statLine(1, 0, 'S', 5), ") S 0 ", ") S x ", 1), Stat{}, true},
		{"empty", "", Stat{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := ParseStat([]byte(tc.stat))
			if tc.bad {
				if err == nil {
					t.Fatalf("ParseStat(%q) = %+v; want an error", tc.stat, st)
				}
				return
			}
			if err != nil || st != tc.want {
				t.Errorf("ParseStat = %+v, %v; want %+v", st, err, tc.want)
			}
		})
	}
}

func TestMapperLookupOnTheHost(t *testing.T) {
	p := newFakeProc(t)
	p.add(100, 5000, gpuA+"::1")
	p.add(101, 5001, "")
	p.write(102, "stat", []byte(statLine(102, 1, 'Z', 5002)))
	p.add(103, 5003, gpuA+"::0")
	if err := os.Chmod(filepath.Join(p.root, "103", "environ"), 0o000); err != nil {
		t.Fatal(err)
	}
	p.add(104, 5004, gpuA+"::2")
	p.write(104, "environ", env("PAD="+strings.Repeat("z", 3<<20), vdev.EnvVar+"="+gpuA+"::2"))
	m := p.mapper()

	id, err := m.Lookup(100, gpuA)
	if want := (Identity{Device: gpuA + "::1", Source: SourceEnviron, StartTicks: 5000, Environment: gpuA + "::1"}); err != nil || id != want {
		t.Errorf("Lookup(100) = %+v, %v; want %+v", id, err, want)
	}
	if id.Mismatch() {
		t.Error("a host process billed by its environment cannot disagree with it")
	}
	if id, err := m.Lookup(101, gpuA); !errors.Is(err, ErrNoDevice) || id.Device != "" || id.StartTicks != 5001 {
		t.Errorf("Lookup(101) = %+v, %v; want ErrNoDevice with the start time", id, err)
	}
	if _, err := m.Lookup(102, gpuA); !errors.Is(err, ErrExited) {
		t.Errorf("Lookup of a zombie = %v, want ErrExited", err)
	}
	if _, err := m.Lookup(999, gpuA); !errors.Is(err, ErrExited) {
		t.Errorf("Lookup of a missing PID = %v, want ErrExited", err)
	}
	if os.Geteuid() != 0 { // root reads a 0000 file anyway
		if _, err := m.Lookup(103, gpuA); err == nil || errors.Is(err, ErrNoDevice) || errors.Is(err, ErrExited) {
			t.Errorf("Lookup of an unreadable environ = %v, want a read error", err)
		}
	}
	if id, err := m.Lookup(104, gpuA); err != nil || id.Device != gpuA+"::2" {
		t.Errorf("an environment of 3 MiB, the device named last: %+v, %v; want it read whole", id, err)
	}
}

// TestMapperBillsContainersByIdentity: inside a container the identity file
// decides, whatever the environment says; without one the environment is
// not believed.
func TestMapperBillsContainersByIdentity(t *testing.T) {
	p := newFakeProc(t)
	a0, a1, b0 := gpuA+"::0", gpuA+"::1", gpuB+"::0"
	p.give("a", a0)
	p.give("a", b0)                               // a container given a device of each GPU
	p.addContainer(200, 1, 100, "a", a0)          // keeps its environment
	p.addContainer(201, 200, 101, "a", "")        // env -u YUNION_MPS_VIRTUAL_DEVICE
	p.addContainer(202, 200, 102, "a", a1)        // names its neighbour's device
	p.addContainer(203, 200, 103, "a", "rubbish") // names nothing valid
	p.addHidden(204, 200, 104, "a", a1)           // unshare + pivot_root, parent still in "a"
	p.addHidden(205, 204, 105, "a", a1)           // and its child: walks up two
	p.addContainer(300, 1, 200, "b", a1)          // a container without the mount
	p.addContainer(400, 1, 300, "c", a1)          // a container with its own file there
	cFile := filepath.Join(p.ctrs, "c", identity.ContainerPath(gpuA))
	if err := os.MkdirAll(filepath.Dir(cFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cFile, []byte(a1+"\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	p.addHidden(500, 1, 400, "d", a1)   // hidden, its parent the host's init
	p.add(600, 500, a1)                 // a runtime on the host...
	p.addHidden(601, 600, 501, "e", a1) // ...whose child hid: the walk stops at the host
	p.addHidden(700, 200, 600, "f", a1) // child of a's process, but in another cgroup
	p.addHidden(206, 1, 106, "a", a1)   // exec'd into a by the runtime (parent outside), hid
	// One cgroup, two views of two devices (two "containers" sharing a
	// cgroup, as namespaces made by hand without cgroups do): ambiguous.
	p.give("g1", a0)
	p.give("g2", a1)
	p.process(900, 1, 900, a0, "0::/shared\n", p.mountNS("g1"), filepath.Join(p.ctrs, "g1"))
	p.process(901, 1, 901, a1, "0::/shared\n", p.mountNS("g2"), filepath.Join(p.ctrs, "g2"))
	p.process(902, 1, 902, a0, "0::/shared\n", p.mountNS("hidden-902"), t.TempDir())
	// The root cgroup is no container's: its processes' views are not used.
	p.give("r", a0)
	p.process(910, 1, 910, a0, "0::/\n1:name=systemd:/\n", p.mountNS("r"), filepath.Join(p.ctrs, "r"))
	p.process(911, 1, 911, a0, "0::/\n1:name=systemd:/\n", p.mountNS("hidden-911"), t.TempDir())
	// A host service in a mount namespace of its own (ProtectSystem): the
	// host's root directory, a cgroup of its own: not a container.
	p.process(920, 1, 920, a0, "0::/system.slice/cuda-job.service\n", p.mountNS("svc"), "/")
	m := p.mapper()

	for _, tc := range []struct {
		pid      int
		gpu      gpu.UUID
		device   string
		source   string
		env      string
		mismatch bool
		err      error
		detail   string
	}{
		{200, gpuA, a0, SourceIdentity, a0, false, nil, ""},
		{200, gpuB, b0, SourceIdentity, a0, true, nil, ""},
		{201, gpuA, a0, SourceIdentity, "", true, nil, ""},
		{202, gpuA, a0, SourceIdentity, a1, true, nil, ""},
		{203, gpuA, a0, SourceIdentity, "invalid: ", true, nil, ""},
		{204, gpuA, a0, SourceAncestor, a1, true, nil, "PID 200"},
		{205, gpuA, a0, SourceAncestor, a1, true, nil, "PID 200"},
		{300, gpuA, "", "", a1, false, ErrNoIdentity, ""},
		{400, gpuA, "", "", a1, false, ErrNoIdentity, "did not make"},
		{500, gpuA, "", "", a1, false, ErrNoIdentity, ""},
		{601, gpuA, "", "", a1, false, ErrNoIdentity, ""},
		{700, gpuA, "", "", a1, false, ErrNoIdentity, "nor the other processes of its cgroup"},
		{206, gpuA, a0, SourceCgroup, a1, true, nil, "PID 200, a process of the same cgroup"},
		{902, gpuA, "", "", a0, false, ErrNoIdentity, "several devices"},
		{911, gpuA, "", "", a0, false, ErrNoIdentity, ""},
		{920, gpuA, "", "", a0, false, ErrHostSandbox, ""},
	} {
		id, err := m.Lookup(tc.pid, tc.gpu)
		if tc.err != nil {
			if !errors.Is(err, tc.err) || id.Device != "" {
				t.Errorf("Lookup(%d, %s) = %+v, %v; want %v", tc.pid, tc.gpu, id, err, tc.err)
			}
		} else if err != nil || id.Device != tc.device || id.Source != tc.source || id.Mismatch() != tc.mismatch {
			t.Errorf("Lookup(%d, %s) = %+v (mismatch %v), %v; want %s by %s, mismatch %v", tc.pid, tc.gpu, id, id.Mismatch(), err, tc.device, tc.source, tc.mismatch)
		}
		if !strings.HasPrefix(id.Environment, tc.env) || (tc.env == "" && id.Environment != "") {
			t.Errorf("Lookup(%d): environment %q, want %q", tc.pid, id.Environment, tc.env)
		}
		if !strings.Contains(id.Detail, tc.detail) {
			t.Errorf("Lookup(%d): detail %q, want it to say %q", tc.pid, id.Detail, tc.detail)
		}
	}

	// Without the host's mount namespace nobody is taken for a host
	// process: environments are not believed at all.
	if err := os.Remove(filepath.Join(p.root, "1", "ns", "mnt")); err != nil {
		t.Fatal(err)
	}
	p.add(800, 700, a1)
	if err := m.Refresh(); err == nil {
		t.Error("Refresh without PID 1's namespace should say so")
	}
	if id, err := m.Lookup(800, gpuA); !errors.Is(err, ErrUnverified) {
		t.Errorf("host namespace unknown: Lookup(800) = %+v, %v; want ErrUnverified", id, err)
	}
	if id, err := m.Lookup(201, gpuA); err != nil || id.Device != a0 {
		t.Errorf("identity files still count: Lookup(201) = %+v, %v", id, err)
	}
	// PID 1's unreadable but the daemon's own readable: its own stands in.
	p.link(os.Getpid(), "ns/mnt", hostNS)
	if err := m.Refresh(); !errors.Is(err, ErrOwnNamespace) {
		t.Errorf("Refresh = %v, want ErrOwnNamespace", err)
	}
	if id, err := m.Lookup(800, gpuA); err != nil || id.Device != a1 || id.Source != SourceEnviron {
		t.Errorf("in the daemon's own namespace: Lookup(800) = %+v, %v; want %s by its environment", id, err, a1)
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
	// A container given A::1 whose second process rewrote its environment
	// to A::0, and a container given nothing that claims A::0.
	p.give("t", gpuA+"::1")
	p.addContainer(30, 1, 800, "t", gpuA+"::1")
	p.addContainer(31, 30, 900, "t", gpuA+"::0")
	p.addContainer(32, 1, 950, "nomount", gpuA+"::0")
	caps := map[string]uint64{
		gpuA + "::0": 8 << 30, gpuA + "::1": 8 << 30, gpuA + "::2": 8 << 30,
		gpuB + "::0": 8 << 30, gpuB + "::1": 8 << 30,
	}
	procs := map[gpu.UUID][]gpu.Process{
		gpuA: {{PID: 10, UsedMemoryBytes: 3 << 30}, {PID: 11, UsedMemoryBytes: 2 << 30}, {PID: 12, UsedMemoryBytes: 1 << 30},
			{PID: 13, UsedMemoryBytes: 5}, {PID: 14, UsedMemoryBytes: 6}, {PID: 15, UsedMemoryBytes: 7}, {PID: 16, UsedMemoryBytes: 8},
			{PID: 30, UsedMemoryBytes: 1 << 30}, {PID: 31, UsedMemoryBytes: 2 << 30}, {PID: 32, UsedMemoryBytes: 9}},
		gpuB: {{PID: 20, UsedMemoryBytes: 4 << 30}},
	}
	u := Account(procs, caps, p.mapper().Lookup)

	env, id := SourceEnviron, SourceIdentity
	want := map[string]DeviceUsage{
		gpuA + "::0": {GPU: gpuA, UsedBytes: 5 << 30, PIDs: []int{10, 11},
			Clients: []Client{{PID: 10, UsedBytes: 3 << 30, StartTicks: 100, Source: env}, {PID: 11, UsedBytes: 2 << 30, StartTicks: 200, Source: env}}},
		// The liar's 2 GiB stay on its own device.
		gpuA + "::1": {GPU: gpuA, UsedBytes: 4 << 30, PIDs: []int{12, 30, 31}, Clients: []Client{{PID: 12, UsedBytes: 1 << 30, StartTicks: 300, Source: env},
			{PID: 30, UsedBytes: 1 << 30, StartTicks: 800, Source: id}, {PID: 31, UsedBytes: 2 << 30, StartTicks: 900, Source: id}}},
		gpuA + "::2": {GPU: gpuA, PIDs: []int{}, Clients: nil},
		gpuB + "::0": {GPU: gpuB, UsedBytes: 4 << 30, PIDs: []int{20}, Clients: []Client{{PID: 20, UsedBytes: 4 << 30, StartTicks: 400, Source: env}}},
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
		{32, "in a container (not the host's mount namespace) where no identity file"},
	}
	if len(u.Unknown) != len(wantUnknown) {
		t.Fatalf("Unknown = %+v, want PIDs 13-16 and 32", u.Unknown)
	}
	// PID 15's identity names a device this host lacks: that is the device
	// shown, not its environment's.
	if got := u.Unknown[2]; got.Device == "" || got.Source == "" {
		t.Errorf("the device PID 15 was identified as should be shown, with how: %+v", got)
	}
	for i, w := range wantUnknown {
		got := u.Unknown[i]
		if got.PID != w.pid || got.GPU != gpuA || !strings.Contains(got.Reason, w.reason) {
			t.Errorf("Unknown[%d] = %+v, want PID %d on %s, reason with %q", i, got, w.pid, gpuA, w.reason)
		}
	}

	if u.Unknown[4].Environment != gpuA+"::0" || u.Unknown[4].Device != "" {
		t.Errorf("the unknown container process's claim should be shown: %+v", u.Unknown[4])
	}
	wantMismatch := []Mismatch{{Mismatch: clientreport.Mismatch{PID: 31, GPU: gpuA, UsedBytes: 2 << 30, Device: gpuA + "::1", Source: id,
		Environment: gpuA + "::0", Reason: "its environment names " + gpuA + "::0; billed to " + gpuA + "::1 by its identity file"}, StartTicks: 900}}
	if !reflect.DeepEqual(u.Mismatches, wantMismatch) {
		t.Errorf("Mismatches =\n%+v\nwant\n%+v", u.Mismatches, wantMismatch)
	}

	// A GPU that was not sampled has no devices in the usage: not measured.
	u = Account(map[gpu.UUID][]gpu.Process{gpuB: nil}, caps, p.mapper().Lookup)
	if _, ok := u.PerDevice[gpuA+"::0"]; ok || len(u.PerDevice) != 2 {
		t.Errorf("with only %s sampled, PerDevice = %v", gpuB, u.PerDevice)
	}
}
