//go:build cgo

package nvml

import (
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"yunion.io/x/mps-daemon/pkg/gpu"
)

// fakeDevice is a hand-built go-nvml mock device that answers everything the
// adapter asks, as a healthy GPU on bus busID would.
func fakeDevice(uuid, busID string) *mock.Device {
	return &mock.Device{
		GetUUIDFunc:        func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetMinorNumberFunc: func() (int, nvml.Return) { return 0, nvml.SUCCESS },
		GetNameFunc:        func() (string, nvml.Return) { return "NVIDIA H20", nvml.SUCCESS },
		GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) {
			p := nvml.PciInfo{PciDeviceId: 0x233510DE}
			PutCString(p.BusId[:], busID)
			return p, nvml.SUCCESS
		},
		GetMemoryInfoFunc:            func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 97871 << 20}, nvml.SUCCESS },
		GetComputeModeFunc:           func() (nvml.ComputeMode, nvml.Return) { return nvml.COMPUTEMODE_DEFAULT, nvml.SUCCESS },
		GetArchitectureFunc:          func() (nvml.DeviceArchitecture, nvml.Return) { return nvml.DEVICE_ARCH_HOPPER, nvml.SUCCESS },
		GetMaxPcieLinkGenerationFunc: func() (int, nvml.Return) { return 5, nvml.SUCCESS },
		GetMaxPcieLinkWidthFunc:      func() (int, nvml.Return) { return 16, nvml.SUCCESS },
	}
}

// fakeLibrary is a hand-built go-nvml mock interface over devs.
func fakeLibrary(devs ...*mock.Device) *mock.Interface {
	return &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return "580.159.04", nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) { return devs[i], nvml.SUCCESS },
	}
}

func TestDevicesFromHandBuiltMock(t *testing.T) {
	// Index 0 sits on the higher bus: the list must come back in bus order.
	lib := fakeLibrary(fakeDevice("GPU-b", "00000000:DB:00.0"), fakeDevice("GPU-a", "00000000:1A:00.0"))
	a, err := NewWithLibrary(lib, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].UUID != "GPU-a" || got[1].UUID != "GPU-b" {
		t.Fatalf("Devices = %+v, want GPU-a then GPU-b", got)
	}
	g := got[0]
	if g.Index != 1 || g.PCI.String() != "0000:1a:00.0" || g.VendorDeviceID() != "10de:2335" ||
		g.MemoryTotal.MiB() != 97871 || g.Architecture != gpu.ArchHopper || g.NUMANode != -1 {
		t.Errorf("Devices()[0] = %+v", g)
	}
}

func TestDevicesErrorsNameTheGPU(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(d *mock.Device, lib *mock.Interface)
		want  []string
		is    error
	}{
		{
			name: "memory info",
			spoil: func(d *mock.Device, _ *mock.Interface) {
				d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
			},
			want: []string{"GPU 1", "GPU-bad", "nvmlDeviceGetMemoryInfo"},
			is:   nvml.ERROR_GPU_IS_LOST,
		},
		{
			name: "uuid",
			spoil: func(d *mock.Device, _ *mock.Interface) {
				d.GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
			},
			want: []string{"GPU 1", "nvmlDeviceGetUUID"},
			is:   nvml.ERROR_UNKNOWN,
		},
		{
			name: "handle",
			spoil: func(_ *mock.Device, lib *mock.Interface) {
				ok := lib.DeviceGetHandleByIndexFunc
				lib.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
					if i == 1 {
						return nil, nvml.ERROR_GPU_IS_LOST
					}
					return ok(i)
				}
			},
			want: []string{"GPU 1", "nvmlDeviceGetHandleByIndex"},
			is:   nvml.ERROR_GPU_IS_LOST,
		},
		{
			name: "compute mode",
			spoil: func(d *mock.Device, _ *mock.Interface) {
				d.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) { return 0, nvml.ERROR_NO_PERMISSION }
			},
			want: []string{"GPU 1", "GPU-bad", "nvmlDeviceGetComputeMode"},
			is:   nvml.ERROR_NO_PERMISSION,
		},
		{
			name: "pcie link",
			spoil: func(d *mock.Device, _ *mock.Interface) {
				d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
			},
			want: []string{"GPU 1", "GPU-bad", "nvmlDeviceGetMaxPcieLinkWidth"},
			is:   nvml.ERROR_UNKNOWN,
		},
		{
			name: "bus id",
			spoil: func(d *mock.Device, _ *mock.Interface) {
				d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
					var p nvml.PciInfo
					PutCString(p.BusId[:], "garbage")
					return p, nvml.SUCCESS
				}
			},
			want: []string{"GPU 1", "GPU-bad", "nvmlDeviceGetPciInfo", "garbage"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := fakeDevice("GPU-bad", "00000000:2A:00.0")
			lib := fakeLibrary(fakeDevice("GPU-good", "00000000:18:00.0"), bad)
			tc.spoil(bad, lib)
			a, err := NewWithLibrary(lib, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = a.Devices(t.Context())
			if err == nil {
				t.Fatal("Devices succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %q is not %v", err, tc.is)
			}
		})
	}
}

func TestOptionalAnswersReadAsUnknown(t *testing.T) {
	// A GPU behind a virtual bridge has no PCIe link to report, and an old
	// driver has no architecture query: that is no reason to fail.
	d := fakeDevice("GPU-vm", "00000000:00:05.0")
	d.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	d.GetArchitectureFunc = func() (nvml.DeviceArchitecture, nvml.Return) { return 0, nvml.ERROR_FUNCTION_NOT_FOUND }
	a, err := NewWithLibrary(fakeLibrary(d), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if g := got[0]; g.PCIeGeneration != 0 || g.PCIeWidth != 0 || g.Architecture != gpu.ArchUnknown {
		t.Errorf("Devices()[0] = %+v, want PCIe 0 x0 and unknown architecture", g)
	}
}

func TestLegacyBusID(t *testing.T) {
	d := fakeDevice("GPU-old", "")
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		var p nvml.PciInfo
		PutCString(p.BusIdLegacy[:], "0000:AB:00.0")
		return p, nvml.SUCCESS
	}
	a, err := NewWithLibrary(fakeLibrary(d), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if s := got[0].PCI.String(); s != "0000:ab:00.0" {
		t.Errorf("PCI = %s, want 0000:ab:00.0", s)
	}
}

func TestInitFailures(t *testing.T) {
	t.Run("library missing", func(t *testing.T) {
		_, err := NewWithLibrary(nvml.New(nvml.WithLibraryPath("/nonexistent/libnvidia-ml.so.1")), nil)
		if !errors.Is(err, ErrLibraryNotFound) {
			t.Fatalf("err = %v, want ErrLibraryNotFound", err)
		}
		for _, w := range []string{"libnvidia-ml.so.1", "--simulate"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not mention %s", err, w)
			}
		}
	})
	t.Run("driver not loaded", func(t *testing.T) {
		lib := fakeLibrary()
		lib.InitFunc = func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }
		_, err := NewWithLibrary(lib, nil)
		if !errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED) || !strings.Contains(err.Error(), "kernel module") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestCloseShutsDownOnce(t *testing.T) {
	lib := fakeLibrary(fakeDevice("GPU-a", "00000000:18:00.0"))
	a, err := NewWithLibrary(lib, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(lib.ShutdownCalls()); n != 1 {
		t.Errorf("nvmlShutdown called %d times, want 1", n)
	}
	if _, err := a.Devices(t.Context()); !errors.Is(err, ErrClosed) {
		t.Errorf("Devices after Close: %v, want ErrClosed", err)
	}
	if err := a.SetComputeMode(t.Context(), "GPU-a", gpu.ComputeModeDefault); !errors.Is(err, ErrClosed) {
		t.Errorf("SetComputeMode after Close: %v, want ErrClosed", err)
	}
}

func TestSplitPCIID(t *testing.T) {
	for _, tc := range []struct {
		id             uint32
		vendor, device uint16
	}{
		{0x233510DE, 0x10de, 0x2335},
		{0x1B3810DE, 0x10de, 0x1b38},
		{0x00000000, 0, 0},
	} {
		v, d := SplitPCIID(tc.id)
		if v != tc.vendor || d != tc.device {
			t.Errorf("SplitPCIID(%#x) = %#x, %#x, want %#x, %#x", tc.id, v, d, tc.vendor, tc.device)
		}
	}
}

func TestCStringRoundTrip(t *testing.T) {
	var signed [16]int8
	var unsigned [8]uint8
	PutCString(signed[:], "0000:AB:00.0")
	PutCString(unsigned[:], "truncated here")
	if got := cString(signed[:]); got != "0000:AB:00.0" {
		t.Errorf("int8 round trip = %q", got)
	}
	if got := cString(unsigned[:]); got != "truncat" {
		t.Errorf("uint8 truncated = %q, want 7 bytes and the NUL", got)
	}
}
