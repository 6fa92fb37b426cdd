package config

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseDevicesMergeKeys(t *testing.T) {
	const in = `mps4: &mps4
  type: NVIDIA_MPS
  virtual_number: 4
small: &small
  virtual_number: 2
devices:
- <<: *mps4
  path: /dev/nvidia0
- <<: [*small, *mps4]
  path: /dev/nvidia1
- <<: *mps4
  virtual_number: 8
  path: /dev/nvidia2
- <<: {type: CPH_AMD_GPU}
  path: /dev/dri/renderD200
`
	df, err := ParseDevices("dev.yml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []DeviceEntry{
		{Index: 0, Line: 7, Path: "/dev/nvidia0", Type: TypeNvidiaMPS, VirtualNumber: 4},
		// The first merged mapping that sets a key wins.
		{Index: 1, Line: 9, Path: "/dev/nvidia1", Type: TypeNvidiaMPS, VirtualNumber: 2},
		// A key of the entry itself wins over a merged one.
		{Index: 2, Line: 11, Path: "/dev/nvidia2", Type: TypeNvidiaMPS, VirtualNumber: 8},
	}
	if !reflect.DeepEqual(df.Entries, want) {
		t.Errorf("got  %+v\nwant %+v", df.Entries, want)
	}
	if len(df.Skipped) != 1 || df.Skipped[0].Type != "CPH_AMD_GPU" {
		t.Errorf("a merged other agent's type is that agent's entry: %+v", df.Skipped)
	}
}

// Other agents' entries stay theirs, whatever they hold.
func TestParseDevicesLeavesOtherAgentsAlone(t *testing.T) {
	const in = `devices:
- {path: /dev/nvidia0, type: NVIDIA_MPS, virtual_number: 2}
- type: CPH_AOSP_BINDER
  virtual_number: 16
  virtual_number: 8
  whatever: [1, 2]
- type: NVIDIA_GPU
  path: /dev/nvidia1
- type: [CPH_AMD_GPU, NETINT_CA_ASIC]
- path: /dev/vastai0
- type: 7
`
	df, err := ParseDevices("dev.yml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(df.Entries) != 1 || len(df.Skipped) != 5 {
		t.Errorf("want 1 entry of ours and 5 skipped, got %+v", df)
	}
}

func TestNearMiss(t *testing.T) {
	for s, want := range map[string]bool{
		"NVIDIA_MPS": false, "nvidia_mps": true, "Nvidia-Mps": true, "NVIDIA MPS": true, "NVIDIA.MPS": true,
		"NVIDIAMPS": true, "NVIDIA__MPS": true, "NVIDIA_MP": true, "NVIDIA_MPSS": true, "NVDIA_MPS": true,
		"NVIDIA_GPU": false, "NVIDIA_GPU_SHARE": false, "NVIDIA_VGPU": false, "CPH_AMD_GPU": false, "": false, "MPS": false,
	} {
		if got := nearMiss(s); got != want {
			t.Errorf("nearMiss(%q) = %v, want %v", s, got, want)
		}
	}
}

// Aliases make a small file a huge tree; reading it stays cheap.
func TestParseDevicesAliasFanOut(t *testing.T) {
	var b strings.Builder
	b.WriteString("l0: &l0 [" + strings.Repeat("x, ", 60) + "x]\n")
	for i := 1; i <= 9; i++ {
		b.WriteString("l" + strconv.Itoa(i) + ": &l" + strconv.Itoa(i) + " [" + strings.Repeat("*l"+strconv.Itoa(i-1)+", ", 60) + "x]\n")
	}
	b.WriteString("m0: &m0 {a: 1}\n")
	for i := 1; i <= 9; i++ {
		b.WriteString("m" + strconv.Itoa(i) + ": &m" + strconv.Itoa(i) + " {<<: [" + strings.Repeat("*m"+strconv.Itoa(i-1)+", ", 60) + "{}]}\n")
	}
	b.WriteString("devices:\n- {type: *l9, path: /dev/nvidia0}\n- {<<: *m9, type: CPH_AMD_GPU}\n")
	start := time.Now()
	_, err := ParseDevices("dev.yml", []byte(b.String()))
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %s", d)
	}
	if err == nil || !strings.Contains(err.Error(), "merge keys (<<) nest too deep or merge too many keys") {
		t.Errorf("want the merge bound named, got %v", err)
	}
}
