package cdi

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// TestInvalidStatesNeverWrite: each state is refused with an error naming
// the problem, Build gives no spec, and Sync leaves the good spec already
// on disk byte for byte, same inode, with nothing beside it.
func TestInvalidStatesNeverWrite(t *testing.T) {
	long := "/" + strings.Repeat("p", 88)
	tests := []struct {
		name   string
		opts   func(*Options)
		devs   func([]Device) []Device
		expect string
	}{
		{"duplicate device", nil, func(d []Device) []Device { return append(d, d[1]) }, `name "` + gpuA + `::0" is also device 1's`},
		{"one id on two devices", nil, func(d []Device) []Device { d[2].ID = d[1].ID; return d }, `name "` + idA0 + `" is also device 1's`},
		{"empty pipe directory", nil, func(d []Device) []Device { d[0].PipeDir = ""; return d }, "pipe directory is empty"},
		{"relative pipe directory", nil, func(d []Device) []Device { d[0].PipeDir = "tmp/pipe"; return d }, `pipe directory "tmp/pipe" is not an absolute clean path`},
		{"unclean pipe directory", nil, func(d []Device) []Device { d[0].PipeDir = "/tmp/../pipe"; return d }, "is not an absolute clean path"},
		{"pipe directory too long for a socket", nil, func(d []Device) []Device { d[0].PipeDir = long; return d }, "would be 108 bytes, over the kernel's 107"},
		{"no identity file", nil, func(d []Device) []Device { d[0].IdentityFile = ""; return d }, "identity file is empty"},
		{"relative identity file", nil, func(d []Device) []Device { d[0].IdentityFile = "identity/x"; return d }, `identity file "identity/x" is not an absolute clean path`},
		{"one identity file for two devices", nil, func(d []Device) []Device { d[2].IdentityFile = d[1].IdentityFile; return d }, "is also device 1's"},
		{"memory cap 0", nil, func(d []Device) []Device { d[3].MemoryLimit = 0; return d }, "memory limit 0 MiB: want > 0"},
		{"thread percentage 0", nil, func(d []Device) []Device { d[3].ThreadPercentage = 0; return d }, "thread percentage 0: want 1..100"},
		{"thread percentage 101", nil, func(d []Device) []Device { d[3].ThreadPercentage = 101; return d }, "thread percentage 101"},
		{"client priority 2", nil, func(d []Device) []Device { d[3].ClientPriority = 2; return d }, "client priority 2: want 0 or 1"},
		{"client priority -1", nil, func(d []Device) []Device { d[4].ClientPriority = -1; return d }, "client priority -1"},
		{"GPU UUID without GPU-", nil, func(d []Device) []Device { d[0].GPU.UUID = gpu.UUID(strings.TrimPrefix(gpuB, "GPU-")); return d }, "want GPU-xxxxxxxx"},
		{"GPU UUID not hex", nil, func(d []Device) []Device { d[1].GPU.UUID = "GPU-4baeae3a-899f-8852-bd11-2e4ce3171ezz"; return d }, "invalid UUID"},
		{"MIG UUID", nil, func(d []Device) []Device { d[1].GPU.UUID = "MIG-4baeae3a-899f-8852-bd11-2e4ce3171eb0"; return d }, "want GPU-"},
		{"inventory id not a UUID", nil, func(d []Device) []Device { d[1].ID = "dev-1"; return d }, `inventory id "dev-1" is not a UUID`},
		{"negative index", nil, func(d []Device) []Device { d[4].Index = -1; return d }, "slice index -1 is negative"},
		{"negative minor", nil, func(d []Device) []Device { d[1].GPU.Minor = -1; d[2].GPU.Minor = -1; return d }, "device minor -1 is negative"},
		{"one GPU, two pipe directories", nil, func(d []Device) []Device { d[2].PipeDir = "/tmp/other"; return d }, "GPU " + gpuA + ` has minor 0 and pipe directory "/tmp/other" here`},
		{"two GPUs, one minor", nil, func(d []Device) []Device {
			for i := range d {
				d[i].GPU.Minor = 0
			}
			return d
		}, "/dev/nvidia0 is also GPU " + gpuB + "'s"},
		{"kind without class", func(o *Options) { o.Kind = "yunion.io" }, nil, `kind "yunion.io": want vendor/class`},
		{"kind with a space", func(o *Options) { o.Kind = "yunion.io/mps gpu" }, nil, "invalid character ' '"},
		{"kind with two slashes", func(o *Options) { o.Kind = "yunion.io/mps/gpu" }, nil, "invalid character '/'"},
		{"relative shm path", func(o *Options) { o.ShmPath = "dev/shm" }, nil, `shm path "dev/shm" is not an absolute clean path`},
		{"relative dev root", func(o *Options) { o.DevRoot = "dev" }, nil, `dev root "dev"`},
		{"view without the devices' directories", viewOn, nil, "view directory is empty"},
		{"relative view directory", viewOn, func(d []Device) []Device { d = withViews(d); d[1].ViewDir = "view/x"; return d }, `view directory "view/x" is not an absolute clean path`},
		{"one view directory for two devices", viewOn, func(d []Device) []Device { d = withViews(d); d[2].ViewDir = d[1].ViewDir; return d }, "is also device 1's"},
		{"relative view library", func(o *Options) { viewOn(o); o.View.Library = "libyunion-mps-view.so" }, withViews, `view library "libyunion-mps-view.so" is not an absolute clean path`},
		{"view library without a preload list", func(o *Options) { viewOn(o); o.View.Preload = "" }, withViews, "preload list is empty"},
		{"preload list without a view library", func(o *Options) { o.View.Preload = "/var/lib/yunion-mps/view/ld.so.preload" }, nil, "without a view library"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testOptions(t)
			good, _, err := Sync(o, hostDevices())
			if err != nil {
				t.Fatal(err)
			}
			before, err := os.ReadFile(good)
			if err != nil {
				t.Fatal(err)
			}
			id := statID(t, good)

			bad, devs := o, hostDevices()
			if tt.opts != nil {
				tt.opts(&bad)
				bad.Dir = o.Dir
			}
			if tt.devs != nil {
				devs = tt.devs(devs)
			}
			spec, err := Build(bad, devs)
			if err == nil || spec != nil {
				t.Fatalf("Build = %v, %v; want no spec and an error", spec, err)
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.expect) {
				t.Fatalf("error %q: want ErrInvalid saying %q", err, tt.expect)
			}
			if _, _, err := Sync(bad, devs); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Sync: %v, want ErrInvalid", err)
			}
			after, err := os.ReadFile(good)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) || statID(t, good) != id {
				t.Error("the good spec was touched")
			}
			if names := dirNames(t, o.Dir); len(names) != 1 {
				t.Errorf("directory holds %q, want only the spec", names)
			}
		})
	}
}

// TestInvalidReportsEveryProblem: an operator sees all problems at once.
func TestInvalidReportsEveryProblem(t *testing.T) {
	d := hostDevices()
	d[0].MemoryLimit, d[5].PipeDir = 0, ""
	_, err := Build(testOptions(t), d)
	for _, want := range []string{"device 0 (" + gpuB + "::2): invalid CDI spec: memory limit 0", "device 5 (" + gpuB + "::3): invalid CDI spec: pipe directory is empty"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v: want it to say %q", err, want)
		}
	}
}

func TestBuildNoDevices(t *testing.T) {
	if _, err := Build(testOptions(t), nil); !errors.Is(err, ErrNoDevices) {
		t.Fatalf("Build(no devices) = %v, want ErrNoDevices", err)
	}
}

// TestBuildOrderIndependent: the same devices in another order give the same
// spec, so a reconcile that lists them differently rewrites nothing.
func TestBuildOrderIndependent(t *testing.T) {
	o := testOptions(t)
	a := mustBuild(t, o, hostDevices())
	rev := hostDevices()
	slices.Reverse(rev)
	b := mustBuild(t, o, rev)
	ea, _ := encode(a)
	eb, _ := encode(b)
	if !bytes.Equal(ea, eb) {
		t.Errorf("order changed the spec:\n%s\n---\n%s", ea, eb)
	}
	var names []string
	for _, d := range a.Devices {
		names = append(names, d.Name)
	}
	want := []string{gpuA + "::0", idA0, gpuA + "::1", idA1, gpuB + "::0", gpuB + "::1", gpuB + "::2", "0f9a3c52-1d7e-4b8a-9e61-3c2d5f7a8b90", gpuB + "::3"}
	if !slices.Equal(names, want) {
		t.Errorf("names %q\nwant  %q", names, want)
	}
	// Names starting with a digit (inventory ids) make 0.5.0 the oldest
	// version that holds the spec: what Debian 12's Podman 4.3.1 accepts.
	if a.Version != "0.5.0" {
		t.Errorf("cdiVersion %q, want 0.5.0", a.Version)
	}
	// Before the inventory gave ids: 0.4.0 (mount types).
	var noIDs []Device
	for _, d := range hostDevices() {
		d.ID = ""
		noIDs = append(noIDs, d)
	}
	if s, err := Build(o, noIDs); err != nil || s.Version != "0.4.0" {
		t.Errorf("without inventory ids: cdiVersion %q (%v), want 0.4.0", s.Version, err)
	}
	// A real character device (a host path in the spec) needs 0.5.0.
	withNodes := Options{Dir: o.Dir, DevRoot: charDevRoot(t, "nvidia1")}
	if s, err := Build(withNodes, noIDs[:1]); err != nil || s.Version != "0.5.0" {
		t.Errorf("with a device node: cdiVersion %q (%v), want 0.5.0", s.Version, err)
	}
}

func TestNames(t *testing.T) {
	q := QualifiedName(DefaultKind, vdev.NameOf(gpuA, 3).String())
	if q != "yunion.io/mps-gpu="+gpuA+"::3" {
		t.Errorf("QualifiedName = %q", q)
	}
	vendor, class, name, err := parser.ParseQualifiedName(q)
	if err != nil || vendor != "yunion.io" || class != "mps-gpu" || name != gpuA+"::3" {
		t.Errorf("the CDI parser reads %q as %q %q %q %v", q, vendor, class, name, err)
	}
}

func TestFromVirtual(t *testing.T) {
	const h200 units.MiB = 143771 // an H200's memory.total
	g := gpu.Info{UUID: gpuA, Minor: 5, MemoryTotal: h200.Bytes()}
	vs := vdev.Split(g, 4, 25, vdev.QoS{})
	d := FromVirtual(vs[2], idA0, "/run/pipe/"+gpuA)
	want := Device{Device: vdev.Device{GPU: g, Index: 2, MemoryLimit: h200 / 4, ThreadPercentage: 25}, ID: idA0, PipeDir: "/run/pipe/" + gpuA}
	if d != want || d.Name() != gpuA+"::2" {
		t.Errorf("FromVirtual = %+v (%s), want %+v", d, d.Name(), want)
	}
	// A batch device of a GPU with mps_qos: its own share, below normal.
	qs := vdev.Split(g, 8, 50, vdev.QoS{LatencySlices: []int{0}, ReservePercent: 8})
	if l, b := FromVirtual(qs[0], "", "/p"), FromVirtual(qs[5], "", "/p"); l.ThreadPercentage != 12 || l.ClientPriority != 0 || b.ThreadPercentage != 13 || b.ClientPriority != 1 {
		t.Errorf("latency %+v, batch %+v: want 12%% at priority 0 and 13%% at priority 1", l, b)
	}
}

// Edits are a device's entry's edits, as Build writes them, and refuse
// what Build refuses.
func TestEdits(t *testing.T) {
	o := Options{DevRoot: t.TempDir()}
	devs := hostDevices()
	s, err := Build(o, devs)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		e, err := Edits(o, d)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(s.Devices, func(sd specs.Device) bool { return sd.Name == d.Name().String() })
		if i < 0 || !reflect.DeepEqual(e, s.Devices[i].ContainerEdits) {
			t.Errorf("%s: Edits %+v, the spec's entry %+v", d.Name(), e, s.Devices[i].ContainerEdits)
		}
	}
	bad := devs[0]
	bad.PipeDir = "relative"
	if _, err := Edits(o, bad); !errors.Is(err, ErrInvalid) {
		t.Errorf("a relative pipe directory: %v, want ErrInvalid", err)
	}
}
