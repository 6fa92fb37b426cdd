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
