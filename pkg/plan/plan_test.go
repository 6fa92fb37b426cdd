package plan

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/pci"
	"yunion.io/x/mps-daemon/pkg/units"
)

const (
	uuidH200 = "GPU-0d1e2f3a-4b5c-6d7e-8f90-a1b2c3d4e5f6"
	uuidP40  = "GPU-76aef7ff-372d-2432-b4b4-beca4d8d3400"
	uuidH100 = "GPU-9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0"
)

// host is a mixed GPU host: an H200, a P40 (Pascal: 16 MPS clients) and an
// H100, listed out of bus order, with render nodes renderD128 to 130 in a
// fake sysfs tree.
func host(t *testing.T) ([]gpu.Info, gpu.Resolver) {
	t.Helper()
	root := t.TempDir()
	r := gpu.Resolver{SysfsRoot: filepath.Join(root, "sys"), DevRoot: filepath.Join(root, "dev")}
	for node, addr := range map[string]string{"renderD128": "0000:18:00.0", "renderD129": "0000:3b:00.0", "renderD130": "0000:af:00.0"} {
		link := filepath.Join(r.SysfsRoot, "class/drm", node, "device")
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../../../bus/pci/devices/"+addr, link); err != nil {
			t.Fatal(err)
		}
	}
	addr := func(s string) pci.Address {
		a, err := pci.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	gpus := []gpu.Info{
		{Index: 2, Minor: 2, UUID: uuidH100, Name: "NVIDIA H100 80GB HBM3", PCI: addr("00000000:AF:00.0"),
			PCIVendorID: 0x10de, PCIDeviceID: 0x2330, MemoryTotal: units.MiB(81559).Bytes(), Architecture: gpu.ArchHopper, NUMANode: 1},
		{Index: 0, Minor: 0, UUID: uuidH200, Name: "NVIDIA H200", PCI: addr("00000000:18:00.0"),
			PCIVendorID: 0x10de, PCIDeviceID: 0x2335, MemoryTotal: units.MiB(143771).Bytes(), Architecture: gpu.ArchHopper, NUMANode: 0},
		{Index: 1, Minor: 1, UUID: uuidP40, Name: "Tesla P40", PCI: addr("00000000:3B:00.0"),
			PCIVendorID: 0x10de, PCIDeviceID: 0x1b38, MemoryTotal: units.MiB(24576).Bytes(), Architecture: gpu.ArchPascal, NUMANode: 0},
	}
	return gpus, r
}

func hostConf(t *testing.T, text string) *config.HostConf {
	t.Helper()
	hc, err := config.ParseHostConf("host.conf", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return hc
}

func devices(t *testing.T, text string) *config.DeviceFile {
	t.Helper()
	df, err := config.ParseDevices("dev.yml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return df
}

// entry is one NVIDIA_MPS entry of three lines.
func entry(path string, n int) string {
	return "- path: " + path + "\n  type: NVIDIA_MPS\n  virtual_number: " + strconv.Itoa(n) + "\n"
}

type split struct {
	addr           string
	n              int
	source         string
	memMiB, thread int
}

func splits(p *Plan) []split {
	var out []split
	for _, g := range p.GPUs {
		if len(g.Devices) != g.VirtualNumber {
			return nil
		}
		d := g.Devices[g.VirtualNumber-1]
		out = append(out, split{g.GPU.PCI.String(), g.VirtualNumber, g.Source, int(d.MemoryLimit), d.ThreadPercentage})
	}
	return out
}

func TestBuild(t *testing.T) {
	for _, tc := range []struct {
		name, hostConf, devices string // devices "": no device file
		want                    []split
		wantSkipped             int
	}{
		{
			name:     "entries name GPUs",
			hostConf: "enable_cuda_mps: true\nmps_thread_percentage: even\n",
			devices:  "devices:\n" + entry("/dev/dri/renderD130", 3) + entry("/dev/dri/renderD128", 4),
			want: []split{
				{"0000:18:00.0", 4, "dev.yml:5", 35942, 25},
				{"0000:af:00.0", 3, "dev.yml:2", 27186, 33},
			},
		},
		{
			name:     "whole GPU by UUID",
			hostConf: "enable_cuda_mps: true\nmps_thread_percentage: even\n",
			devices:  "devices:\n" + entry(strings.ToLower(uuidH200), 1),
			want:     []split{{"0000:18:00.0", 1, "dev.yml:2", 143771, 100}},
		},
		{
			name:     "48 on Hopper",
			hostConf: "enable_cuda_mps: true\nmps_thread_percentage: even\n",
			devices:  "devices:\n" + entry("AF:00.0", 48),
			want:     []split{{"0000:af:00.0", 48, "dev.yml:2", 1699, 2}},
		},
		{
			name:     "16 on Pascal",
			hostConf: "enable_cuda_mps: true\nmps_thread_percentage: even\n",
			devices:  "devices:\n" + entry("/dev/nvidia1", 16),
			want:     []split{{"0000:3b:00.0", 16, "dev.yml:2", 1536, 6}},
		},
		{
			name:     "no device file: every GPU gets cuda_mps_replicas",
			hostConf: "enable_cuda_mps: true\nmps_thread_percentage: even\ncuda_mps_replicas: 4\n",
			want: []split{
				{"0000:18:00.0", 4, "cuda_mps_replicas", 35942, 25},
				{"0000:3b:00.0", 4, "cuda_mps_replicas", 6144, 25},
				{"0000:af:00.0", 4, "cuda_mps_replicas", 20389, 25},
			},
		},
		{
			name:     "only other agents' entries",
			hostConf: "enable_cuda_mps: true\nmps_thread_percentage: even\n",
			devices:  "devices:\n- path: /dev/dri/renderD129\n  type: NVIDIA_GPU_SHARE\n  virtual_number: 99\n",
			want: []split{
				{"0000:18:00.0", 10, "cuda_mps_replicas", 14377, 10},
				{"0000:3b:00.0", 10, "cuda_mps_replicas", 2457, 10},
				{"0000:af:00.0", 10, "cuda_mps_replicas", 8155, 10},
			},
			wantSkipped: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gpus, r := host(t)
			var df *config.DeviceFile
			if tc.devices != "" {
				df = devices(t, tc.devices)
			}
			p, err := Build(hostConf(t, tc.hostConf), df, gpus, r)
			if err != nil {
				t.Fatal(err)
			}
			if !p.Enabled {
				t.Error("plan not enabled")
			}
			if got := splits(p); !slices.Equal(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if len(p.Skipped) != tc.wantSkipped {
				t.Errorf("got %d skipped entries, want %d", len(p.Skipped), tc.wantSkipped)
			}
		})
	}
}

func TestBuildUnshared(t *testing.T) {
	gpus, r := host(t)
	df := devices(t, "devices:\n"+entry("/dev/dri/renderD129", 2))
	p, err := Build(hostConf(t, "enable_cuda_mps: true\n"), df, gpus, r)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range p.Unshared {
		got = append(got, g.PCI.String())
	}
	if want := []string{"0000:18:00.0", "0000:af:00.0"}; !slices.Equal(got, want) {
		t.Errorf("GPUs left whole: got %v, want %v", got, want)
	}
}

func TestBuildDisabled(t *testing.T) {
	gpus, r := host(t)
	df := devices(t, "devices:\n"+entry("/dev/dri/renderD199", 4)+entry("/dev/nvidia1", 40))
	p, err := Build(hostConf(t, "enable_cuda_mps: false\ncuda_mps_replicas: 40\n"), df, gpus, r)
	if err != nil {
		t.Fatalf("a disabled host must not fail on its device file: %v", err)
	}
	if p.Enabled || len(p.GPUs) != 0 || p.VirtualDevices() != 0 {
		t.Errorf("want an empty plan, got %+v", p)
	}
	if p, err := Build(nil, nil, gpus, r); err != nil || p.Enabled {
		t.Errorf("no host.conf: want the default (disabled), got %+v, %v", p, err)
	}
}

func TestBuildErrors(t *testing.T) {
	for _, tc := range []struct {
		name, hostConf, devices string
		want                    []string // <sys> stands for the sysfs root
		wantGPUs                []string // what the partial plan still shares
	}{
		{
			name:     "path names no GPU",
			devices:  "devices:\n" + entry("/dev/dri/renderD128", 2) + entry("/dev/dri/renderD199", 2),
			want:     []string{"dev.yml:5: devices[1].path: render node /dev/dri/renderD199: <sys>/class/drm/renderD199/device: no such file"},
			wantGPUs: []string{"0000:18:00.0"},
		},
		{
			name:    "address of no GPU",
			devices: "devices:\n" + entry("5e:00.0", 2),
			want:    []string{"dev.yml:2: devices[0].path: PCI address 0000:5e:00.0 is not an NVIDIA GPU seen by NVML (GPUs: 0000:af:00.0, 0000:18:00.0, 0000:3b:00.0)"},
		},
		{
			name:    "17 on Pascal",
			devices: "devices:\n" + entry("/dev/dri/renderD129", 17),
			want:    []string{"dev.yml:2: devices[0].virtual_number: 17 virtual devices exceed the 16 MPS clients a Pascal GPU accepts (Tesla P40 " + uuidP40 + " at 0000:3b:00.0)"},
		},
		{
			name:    "49 on Hopper",
			devices: "devices:\n" + entry("/dev/nvidia0", 49),
			want:    []string{"dev.yml:2: devices[0].virtual_number: 49 virtual devices exceed the 48 MPS clients a Hopper GPU accepts (NVIDIA H200 " + uuidH200 + " at 0000:18:00.0)"},
		},
		{
			name:     "same GPU twice",
			devices:  "devices:\n" + entry("/dev/dri/renderD128", 2) + entry("00000000:18:00.0", 4),
			want:     []string{`dev.yml:5: devices[1].path: "00000000:18:00.0" and devices[0].path ("/dev/dri/renderD128", line 2) name the same GPU, 0000:18:00.0 (` + uuidH200 + `): keep one entry per GPU`},
			wantGPUs: []string{"0000:18:00.0"},
		},
		{
			name:     "cuda_mps_replicas too many for Pascal",
			hostConf: "cuda_mps_replicas: 17\n",
			want:     []string{"host.conf:2: cuda_mps_replicas: 17 virtual devices exceed the 16 MPS clients a Pascal GPU accepts (Tesla P40 " + uuidP40 + " at 0000:3b:00.0)"},
			wantGPUs: []string{"0000:18:00.0", "0000:af:00.0"},
		},
		{
			name: "every error reported",
			devices: "devices:\n" + entry("/dev/dri/renderD199", 2) + entry("/dev/dri/renderD129", 20) +
				entry("/dev/dri/renderD130", 2) + entry("af:00.0", 2),
			want: []string{
				"dev.yml:2: devices[0].path: render node /dev/dri/renderD199: <sys>/class/drm/renderD199/device: no such file",
				"dev.yml:5: devices[1].virtual_number: 20 virtual devices exceed the 16 MPS clients a Pascal GPU accepts (Tesla P40 " + uuidP40 + " at 0000:3b:00.0)",
				`dev.yml:11: devices[3].path: "af:00.0" and devices[2].path ("/dev/dri/renderD130", line 8) name the same GPU, 0000:af:00.0 (` + uuidH100 + `): keep one entry per GPU`,
			},
			wantGPUs: []string{"0000:af:00.0"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gpus, r := host(t)
			var df *config.DeviceFile
			if tc.devices != "" {
				df = devices(t, tc.devices)
			}
			p, err := Build(hostConf(t, "enable_cuda_mps: true\n"+tc.hostConf), df, gpus, r)
			if err == nil {
				t.Fatalf("no error; plan %+v", splits(p))
			}
			want := strings.ReplaceAll(strings.Join(tc.want, "\n"), "<sys>", r.SysfsRoot)
			if err.Error() != want {
				t.Errorf("got\n%s\nwant\n%s", err, want)
			}
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Errorf("want *config.Error, got %T", err)
			}
			var got []string
			for _, g := range p.GPUs {
				got = append(got, g.GPU.PCI.String())
			}
			if !slices.Equal(got, tc.wantGPUs) {
				t.Errorf("partial plan shares %v, want %v", got, tc.wantGPUs)
			}
		})
	}
}

func TestBuildReplicasWithoutFile(t *testing.T) {
	gpus, r := host(t)
	hc := config.DefaultHostConf()
	hc.EnableCudaMPS, hc.CudaMPSReplicas = true, 20
	_, err := Build(hc, nil, gpus, r)
	want := "host.conf: cuda_mps_replicas: 20 virtual devices exceed the 16 MPS clients a Pascal GPU accepts (Tesla P40 " + uuidP40 + " at 0000:3b:00.0)"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

// TestSharedMemoryLimits: the single daemon's ordinal 0 holds the largest
// cap of the GPUs it serves, each other ordinal its own GPU's; a GPU the
// plan does not share gets none.
func TestSharedMemoryLimits(t *testing.T) {
	gpus, r := host(t)
	p, err := Build(hostConf(t, "enable_cuda_mps: true\n"), devices(t, "devices:\n"+entry(uuidH200, 4)+entry(uuidH100, 2)), gpus, r)
	if err != nil {
		t.Fatal(err)
	}
	h200, h100 := units.MiB(143771/4), units.MiB(81559/2)
	for _, c := range []struct {
		order []gpu.UUID
		want  []units.MiB
	}{
		// The H100's half (40779 MiB) is the larger cap.
		{[]gpu.UUID{uuidH200, uuidH100}, []units.MiB{h100, h100}},
		{[]gpu.UUID{uuidH100, uuidH200}, []units.MiB{h100, h200}},
		{[]gpu.UUID{uuidP40, uuidH100, uuidH200}, []units.MiB{h100, h100, h200}},
		{[]gpu.UUID{uuidP40}, []units.MiB{0}},
		{[]gpu.UUID{uuidH200}, []units.MiB{h200}},
	} {
		if got := p.SharedMemoryLimits(c.order); !slices.Equal(got, c.want) {
			t.Errorf("SharedMemoryLimits(%v) = %v, want %v", c.order, got, c.want)
		}
	}
	// The single daemon's own list puts the largest cap first: ordinal 0's
	// limit is its GPU's own cap.
	order := p.SharedOrder()
	if !slices.Equal(order, []gpu.UUID{uuidH100, uuidH200}) {
		t.Errorf("SharedOrder() = %v, want the H100 (the larger cap) first", order)
	}
	if got := p.SharedMemoryLimits(order); !slices.Equal(got, []units.MiB{h100, h200}) {
		t.Errorf("SharedMemoryLimits(SharedOrder()) = %v: ordinal 0 is not its own GPU's cap", got)
	}
}

// A GPU shared by claims (sharing: claims) is one device of the whole GPU,
// whose caps are its control daemon's defaults, and takes virtual_number
// claims; its neighbour is split as ever.
func TestBuildClaims(t *testing.T) {
	gpus, r := host(t)
	df := devices(t, "devices:\n"+entry("/dev/dri/renderD130", 3)+entry("/dev/dri/renderD128", 8)+"  sharing: claims\n")
	p, err := Build(hostConf(t, "enable_cuda_mps: true\nmps_thread_percentage: 60\n"), df, gpus, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.GPUs) != 2 {
		t.Fatalf("plan has %d GPUs, want 2", len(p.GPUs))
	}
	c, s := p.GPUs[0], p.GPUs[1]
	if !c.Sharing.Claims() || c.VirtualNumber != 8 || len(c.Devices) != 1 || c.Devices[0].MemoryLimit != 143771 || c.Devices[0].ThreadPercentage != 60 || c.Devices[0].Index != 0 {
		t.Errorf("the H200 shared by claims: %+v", c)
	}
	if d := c.Defaults(); d.ThreadPercentage != 60 {
		t.Errorf("its control daemon's defaults %+v, want the whole device's 60%%", d)
	}
	if s.Sharing.Claims() || s.VirtualNumber != 3 || len(s.Devices) != 3 || s.Devices[2].MemoryLimit != 27186 {
		t.Errorf("the H100 in slices: %+v", s)
	}
	if p.VirtualDevices() != 4 {
		t.Errorf("%d virtual devices, want 4 (3 slices and the whole H200)", p.VirtualDevices())
	}
}

// Claims need a control daemon per GPU, and count against the MPS client
// limit as virtual devices do.
func TestBuildClaimsErrors(t *testing.T) {
	gpus, r := host(t)
	for _, tc := range []struct{ name, hostConf, devices, want string }{
		{"single layout", "mps_pipe_layout: single\n", "devices:\n" + entry("/dev/dri/renderD128", 4) + "  sharing: claims\n",
			"dev.yml:2: devices[0].sharing: sharing: claims needs a control daemon of the GPU's own (mps_pipe_layout per-gpu): the single layout's one daemon has one default for every GPU, which a claim's client could only lower"},
		{"17 claims on Pascal", "", "devices:\n" + entry("/dev/nvidia1", 17) + "  sharing: claims\n",
			"dev.yml:2: devices[0].virtual_number: 17 claims exceed the 16 MPS clients a Pascal GPU accepts (Tesla P40 " + uuidP40 + " at 0000:3b:00.0)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Build(hostConf(t, "enable_cuda_mps: true\n"+tc.hostConf), devices(t, tc.devices), gpus, r)
			if err == nil || err.Error() != tc.want {
				t.Errorf("got %v, want %s", err, tc.want)
			}
			if p == nil || len(p.GPUs) != 0 {
				t.Errorf("the refused GPU is in the plan: %+v", p)
			}
		})
	}
}
