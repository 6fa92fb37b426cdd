package gpu

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeHost builds a sysfs and a /dev tree shaped like a real GPU host's: a
// BMC VGA device at 0000:03:00.0 and four NVIDIA GPUs, three of them on
// buses with hex letters (the Cloudpods issue 24931 case), one in domain 1.
func fakeHost(t *testing.T) (Resolver, []Info) {
	t.Helper()
	root := t.TempDir()
	r := Resolver{SysfsRoot: filepath.Join(root, "sys"), DevRoot: filepath.Join(root, "dev")}
	mkdir := func(p string) {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, name string) {
		mkdir(filepath.Dir(name))
		if err := os.Symlink(target, name); err != nil {
			t.Fatal(err)
		}
	}
	sys, dev := r.SysfsRoot, r.DevRoot
	for _, a := range []string{"0000:03:00.0", "0000:18:00.0", "0000:3b:00.0", "0000:af:00.0", "0001:da:00.0"} {
		mkdir(filepath.Join(sys, "bus/pci/devices", a))
	}
	// renderD128 as the kernel lays it out: the class entry links into the
	// device hierarchy, whose device link points at the PCI function.
	mkdir(filepath.Join(sys, "devices/pci0000:17/0000:17:00.0/0000:18:00.0"))
	link("../../../0000:18:00.0", filepath.Join(sys, "devices/pci0000:17/0000:17:00.0/0000:18:00.0/drm/renderD128/device"))
	link("../../devices/pci0000:17/0000:17:00.0/0000:18:00.0/drm/renderD128", filepath.Join(sys, "class/drm/renderD128"))
	// The rest in the short form.
	link("../../../bus/pci/devices/0000:3b:00.0", filepath.Join(sys, "class/drm/renderD129/device"))
	link("../../../bus/pci/devices/0000:af:00.0", filepath.Join(sys, "class/drm/renderD130/device"))
	link("../../../bus/pci/devices/0001:da:00.0", filepath.Join(sys, "class/drm/renderD131/device"))
	link("../../../bus/pci/devices/0000:03:00.0", filepath.Join(sys, "class/drm/card0/device"))
	link("../../../bus/pci/devices/0000:03:00.0", filepath.Join(sys, "class/drm/renderD135/device"))
	// A dangling device link still names its device.
	link("../../../bus/pci/devices/0000:3B:00.0", filepath.Join(sys, "class/drm/renderD136/device"))
	link("../../../devices/virtual/vgem", filepath.Join(sys, "class/drm/renderD137/device"))
	mkdir(filepath.Join(sys, "class/drm/renderD138"))
	if err := os.WriteFile(filepath.Join(sys, "class/drm/renderD138/device"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	link("../renderD129", filepath.Join(dev, "dri/by-path/pci-0000:3b:00.0-render"))
	link("../card0", filepath.Join(dev, "dri/by-path/pci-0000:03:00.0-card"))
	// Points at a render node sysfs does not have: the name still says af.
	link("../renderD199", filepath.Join(dev, "dri/by-path/pci-0000:af:00.0-render"))
	link("../../null", filepath.Join(dev, "dri/by-path/pci-0001:da:00.0-render"))

	gpus := []Info{
		{Index: 0, Minor: 0, UUID: "GPU-1d6a1b2c-0000-4e5f-8a9b-000000000000", PCI: mustParse(t, "0000:18:00.0")},
		{Index: 1, Minor: 1, UUID: "GPU-1d6a1b2c-0001-4e5f-8a9b-000000000001", PCI: mustParse(t, "0000:3b:00.0")},
		{Index: 2, Minor: 2, UUID: "GPU-1d6a1b2c-0002-4e5f-8a9b-000000000002", PCI: mustParse(t, "0000:af:00.0")},
		{Index: 3, Minor: 5, UUID: "GPU-1d6a1b2c-0003-4e5f-8a9b-000000000003", PCI: mustParse(t, "0001:da:00.0")},
	}
	return r, gpus
}

func TestResolve(t *testing.T) {
	r, gpus := fakeHost(t)
	for _, tc := range []struct {
		path      string
		wantIndex int
	}{
		{"GPU-1d6a1b2c-0001-4e5f-8a9b-000000000001", 1},
		{"gpu-1D6A1B2C-0002-4E5F-8A9B-000000000002", 2},
		{"0000:3b:00.0", 1},
		{"00000000:3B:00.0", 1}, // nvidia-smi's spelling
		{"3B:00.0", 1},
		{"af:00.0", 2},
		{"0001:DA:00.0", 3},
		{" 18:00.0 ", 0},
		{"/dev/nvidia0", 0},
		{"/dev/nvidia5", 3}, // the minor, not NVML's index
		{"/dev/dri/renderD128", 0},
		{"/dev/dri/renderD129", 1},
		{"/dev/dri/renderD130", 2},
		{"/dev/dri/renderD131", 3},
		{"/dev/dri/renderD136", 1}, // dangling device link, upper-case name
		{"/dev/dri/../dri/renderD129", 1},
		{"/dev/dri/by-path/pci-0000:3b:00.0-render", 1},
		{"/dev/dri/by-path/pci-0000:af:00.0-render", 2}, // link to a node sysfs lacks
		{"/dev/dri/by-path/pci-0001:da:00.0-render", 3}, // link to something else
		{"/dev/dri/by-path/pci-0000:18:00.0-render", 0}, // no link at all
		{"/dev/dri/by-path/pci-0000:AF:00.0-render", 2},
	} {
		t.Run(tc.path, func(t *testing.T) {
			g, err := r.Resolve(tc.path, gpus)
			if err != nil {
				t.Fatal(err)
			}
			if g.Index != tc.wantIndex {
				t.Errorf("resolved to GPU %d (%s), want GPU %d", g.Index, g.PCI, tc.wantIndex)
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	r, gpus := fakeHost(t)
	const list = "GPUs: 0000:18:00.0, 0000:3b:00.0, 0000:af:00.0, 0001:da:00.0"
	for _, tc := range []struct {
		path string
		want string // <sys> and <dev> stand for the roots
	}{
		{"", "empty path"},
		{"GPU-ffffffff-0000-0000-0000-000000000000", "GPU UUID GPU-ffffffff-0000-0000-0000-000000000000 is not a GPU seen by NVML (GPUs: GPU-1d6a1b2c-0000-4e5f-8a9b-000000000000, GPU-1d6a1b2c-0001-4e5f-8a9b-000000000001, GPU-1d6a1b2c-0002-4e5f-8a9b-000000000002, GPU-1d6a1b2c-0003-4e5f-8a9b-000000000003)"},
		{"0000:3b:00.1", "PCI address 0000:3b:00.1 is not an NVIDIA GPU seen by NVML (" + list + ")"},
		{"03:00.0", "PCI address 0000:03:00.0 is not an NVIDIA GPU seen by NVML (" + list + ")"},
		{"3b:20.0", `pci address "3b:20.0": device must be 00 to 1f`},
		{"/dev/nvidia3", "/dev/nvidia3: no GPU seen by NVML has minor number 3 (minor numbers: 0, 1, 2, 5)"},
		{"/dev/nvidiactl", "/dev/nvidiactl: not a device path this daemon understands (want /dev/nvidiaN, /dev/dri/renderDN or /dev/dri/by-path/pci-<address>-render)"},
		{"/dev/dri/renderD199", "render node /dev/dri/renderD199: <sys>/class/drm/renderD199/device: no such file"},
		{"/dev/dri/renderD135", "render node /dev/dri/renderD135 is PCI device 0000:03:00.0, which is not an NVIDIA GPU seen by NVML (" + list + ")"},
		{"/dev/dri/card0", "card node /dev/dri/card0 is PCI device 0000:03:00.0, which is not an NVIDIA GPU seen by NVML (" + list + ")"},
		{"/dev/dri/renderD137", "render node /dev/dri/renderD137: <sys>/class/drm/renderD137/device points to ../../../devices/virtual/vgem, not a PCI device"},
		{"/dev/dri/renderD138", "render node /dev/dri/renderD138: <sys>/class/drm/renderD138/device: not a symbolic link"},
		{"/dev/dri/by-path/pci-0000:03:00.0-card", "by-path link /dev/dri/by-path/pci-0000:03:00.0-card is PCI device 0000:03:00.0, which is not an NVIDIA GPU seen by NVML (" + list + ")"},
		{"/dev/dri/by-path/pci-0000:5e:00.0-render", "by-path link /dev/dri/by-path/pci-0000:5e:00.0-render names PCI device 0000:5e:00.0, which is not an NVIDIA GPU seen by NVML (" + list + ")"},
		{"/dev/dri/by-path/pci-nonsense-render", `/dev/dri/by-path/pci-nonsense-render: cannot follow it (<dev>/dri/by-path/pci-nonsense-render: no such file) and its name holds no PCI address: pci address "nonsense": want [domain:]bus:device.function`},
		{"renderD128", `"renderD128" is not a GPU UUID, a PCI address or a /dev path (want GPU-..., 0000:1a:00.0, /dev/nvidiaN, /dev/dri/renderDN or /dev/dri/by-path/pci-<address>-render)`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			g, err := r.Resolve(tc.path, gpus)
			if err == nil {
				t.Fatalf("resolved to %+v, want an error", g)
			}
			want := strings.NewReplacer("<sys>", r.SysfsRoot, "<dev>", r.DevRoot).Replace(tc.want)
			if err.Error() != want {
				t.Errorf("got  %s\nwant %s", err, want)
			}
			if !errors.Is(err, ErrNoGPU) {
				t.Errorf("error does not wrap ErrNoGPU")
			}
		})
	}
}

func TestResolveNoGPUs(t *testing.T) {
	r, _ := fakeHost(t)
	_, err := r.Resolve("/dev/dri/renderD128", nil)
	want := "render node /dev/dri/renderD128 is PCI device 0000:18:00.0, which is not an NVIDIA GPU seen by NVML (NVML sees no GPU)"
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}

func TestResolveKeepsCause(t *testing.T) {
	r, gpus := fakeHost(t)
	_, err := r.Resolve("/dev/dri/renderD199", gpus)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("want the sysfs error to stay visible to errors.Is, got %v", err)
	}
}
