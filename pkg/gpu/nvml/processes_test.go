//go:build cgo

package nvml

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"yunion.io/x/mps-daemon/pkg/gpu"
)

func TestSimulatedMPSProcesses(t *testing.T) {
	a, h := newSim(t, "2xH200")
	gpus := h.GPUs()
	// A fresh simulated host runs no MPS clients.
	for _, g := range gpus {
		got, err := a.MPSProcesses(t.Context(), g.UUID)
		if err != nil || len(got) != 0 {
			t.Fatalf("MPSProcesses(%s) on a fresh host = %v, %v; want none", g.UUID, got, err)
		}
	}
	set := []gpu.Process{{PID: 981, UsedMemoryBytes: 20368 << 20}, {PID: 42, UsedMemoryBytes: 1168 << 20}}
	if err := h.SetMPSProcesses(gpus[1].UUID, set); err != nil {
		t.Fatal(err)
	}
	got, err := a.MPSProcesses(t.Context(), gpus[1].UUID)
	if err != nil {
		t.Fatal(err)
	}
	want := []gpu.Process{{PID: 42, UsedMemoryBytes: 1168 << 20}, {PID: 981, UsedMemoryBytes: 20368 << 20}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("MPSProcesses = %+v, want %+v (sorted by PID)", got, want)
	}
	if other, err := a.MPSProcesses(t.Context(), gpus[0].UUID); err != nil || len(other) != 0 {
		t.Errorf("the other GPU lists %v, %v; want none", other, err)
	}
	if err := h.SetMPSProcesses(gpus[1].UUID, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := a.MPSProcesses(t.Context(), gpus[1].UUID); err != nil || len(got) != 0 {
		t.Errorf("after clearing: %v, %v", got, err)
	}
	if err := h.SetMPSProcesses("GPU-nope", set); err == nil {
		t.Error("SetMPSProcesses on an unknown GPU succeeded")
	}
	if err := h.SetMPSProcesses(gpus[0].UUID, []gpu.Process{{PID: -1}}); err == nil {
		t.Error("SetMPSProcesses with PID -1 succeeded")
	}
	if _, err := a.MPSProcesses(t.Context(), "GPU-nope"); err == nil || !strings.Contains(err.Error(), "GPU-nope") {
		t.Errorf("MPSProcesses of an unknown GPU: %v", err)
	}
}

func TestMPSProcessesAnswers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		infos   []nvml.ProcessInfo
		ret     nvml.Return
		want    []gpu.Process
		wantErr string
		is      error
	}{
		{name: "one entry per context is summed",
			infos: []nvml.ProcessInfo{{Pid: 7, UsedGpuMemory: 100}, {Pid: 3, UsedGpuMemory: 5}, {Pid: 7, UsedGpuMemory: 20}},
			want:  []gpu.Process{{PID: 3, UsedMemoryBytes: 5}, {PID: 7, UsedMemoryBytes: 120}}},
		{name: "none", want: []gpu.Process{}},
		{name: "not supported is an error, not an empty list", ret: nvml.ERROR_NOT_SUPPORTED,
			wantErr: "nvmlDeviceGetMPSComputeRunningProcesses", is: gpu.ErrNotSupported},
		{name: "unknown usage is an error", infos: []nvml.ProcessInfo{{Pid: 9, UsedGpuMemory: valueNotAvailable}},
			wantErr: "PID 9"},
		{name: "gpu lost", ret: nvml.ERROR_GPU_IS_LOST, wantErr: "nvmlDeviceGetMPSComputeRunningProcesses", is: nvml.ERROR_GPU_IS_LOST},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := fakeDevice("GPU-x", "00000000:1A:00.0")
			d.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
				if tc.ret == 0 {
					return tc.infos, nvml.SUCCESS
				}
				return nil, tc.ret
			}
			got, err := mpsProcesses(d, "GPU-x")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "GPU-x") {
					t.Fatalf("err = %v, want one naming GPU-x and %q", err, tc.wantErr)
				}
				if tc.is != nil && !errors.Is(err, tc.is) {
					t.Errorf("err %v is not %v", err, tc.is)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("mpsProcesses = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
