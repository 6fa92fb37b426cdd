package config

import (
	"errors"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLoadDevicesMixedHost(t *testing.T) {
	df, err := LoadDevices("testdata/host_container_device.yml")
	if err != nil {
		t.Fatal(err)
	}
	want := &DeviceFile{
		Path: "testdata/host_container_device.yml",
		Entries: []DeviceEntry{
			{Index: 0, Line: 4, Path: "/dev/dri/renderD128", Type: "NVIDIA_MPS", VirtualNumber: 4},
			{Index: 1, Line: 7, Path: "/dev/dri/by-path/pci-0000:3b:00.0-render", Type: "NVIDIA_MPS", VirtualNumber: 2},
		},
		// Other agents' entries are kept as written, bad values included.
		Skipped: []DeviceEntry{
			{Index: 2, Line: 11, Path: "/dev/dri/renderD130", Type: "NVIDIA_GPU_SHARE", VirtualNumber: 8},
			{Index: 3, Line: 14, Type: "CPH_AOSP_BINDER", VirtualNumber: 16},
			{Index: 4, Line: 16, Path: "/dev/dri/renderD131", Type: "CPH_AMD_GPU"},
			{Index: 5, Line: 19, Path: "/dev/vastai0", Type: "VASTAITECH_GPU"},
			{Index: 6, Line: 21, Path: "/dev/nvme1", Type: "NETINT_CA_QUADRA"},
		},
	}
	if !reflect.DeepEqual(df, want) {
		t.Errorf("got  %+v\nwant %+v", df, want)
	}
}

func TestParseDevicesNoEntries(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"empty", ""},
		{"comments only", "# no devices on this host\n"},
		{"no devices key", "other_agent: {enabled: true}\n"},
		{"devices empty", "devices:\n"},
		{"devices empty list", "devices: []\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			df, err := ParseDevices("dev.yml", []byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if len(df.Entries) != 0 || len(df.Skipped) != 0 || df.Path != "dev.yml" {
				t.Errorf("want an empty file, got %+v", df)
			}
		})
	}
}

func TestParseDevicesQuotedNumber(t *testing.T) {
	df, err := ParseDevices("dev.yml", []byte("devices:\n- {path: GPU-1, type: NVIDIA_MPS, virtual_number: \"3\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []DeviceEntry{{Index: 0, Line: 2, Path: "GPU-1", Type: "NVIDIA_MPS", VirtualNumber: 3}}
	if !reflect.DeepEqual(df.Entries, want) {
		t.Errorf("got %+v, want %+v", df.Entries, want)
	}
}

func TestParseDevicesErrors(t *testing.T) {
	const head = "devices:\n- path: /dev/dri/renderD128\n  type: NVIDIA_MPS\n  virtual_number: 2\n" // lines 1-4, valid
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"syntax", "devices:\n- path: [\n", []string{`dev.yml:2: invalid YAML: did not find expected node content`}},
		{"top level list", "- path: /dev/dri/renderD128\n", []string{`dev.yml:1: want a mapping with a devices list at the top level, got a list`}},
		{"devices a mapping", "devices:\n  path: /dev/dri/renderD128\n", []string{`dev.yml:2: devices: want a list of devices, got a mapping`}},
		{"entry a string", head + "- /dev/dri/renderD129\n", []string{`dev.yml:5: devices[1]: want a mapping with path, type and virtual_number, got "/dev/dri/renderD129"`}},
		{"no path", head + "- type: NVIDIA_MPS\n  virtual_number: 2\n", []string{`dev.yml:5: devices[1].path: missing: an NVIDIA_MPS entry must name its GPU`}},
		{"empty path", head + "- type: NVIDIA_MPS\n  path: \"\"\n  virtual_number: 2\n", []string{`dev.yml:6: devices[1].path: must not be empty`}},
		{"path a list", head + "- type: NVIDIA_MPS\n  path: [a, b]\n  virtual_number: 2\n", []string{`dev.yml:6: devices[1].path: want a single value, got a list`}},
		{"no virtual_number", head + "- type: NVIDIA_MPS\n  path: /dev/nvidia1\n", []string{`dev.yml:5: devices[1].virtual_number: missing: say how many virtual devices to split the GPU into`}},
		{"virtual_number text", head + "- type: NVIDIA_MPS\n  path: /dev/nvidia1\n  virtual_number: four\n", []string{`dev.yml:7: devices[1].virtual_number: want a whole number, got "four"`}},
		{"virtual_number zero", head + "- type: NVIDIA_MPS\n  path: /dev/nvidia1\n  virtual_number: 0\n", []string{`dev.yml:7: devices[1].virtual_number: must be at least 1, got 0`}},
		{"virtual_number negative", head + "- type: NVIDIA_MPS\n  path: /dev/nvidia1\n  virtual_number: -2\n", []string{`dev.yml:7: devices[1].virtual_number: must be at least 1, got -2`}},
		// Silent misreads where the file is ours (entry.go).
		{"duplicate virtual_number", "devices:\n- path: /dev/nvidia0\n  type: NVIDIA_MPS\n  virtual_number: 4\n  virtual_number: 1\n",
			[]string{`dev.yml:5: devices[0].virtual_number: set again (first at line 4); YAML keys must be unique`}},
		{"duplicate path", "devices:\n- path: /dev/nvidia0\n  type: NVIDIA_MPS\n  path: /dev/nvidia1\n  virtual_number: 4\n",
			[]string{`dev.yml:4: devices[0].path: set again (first at line 2); YAML keys must be unique`}},
		{"duplicate type", "devices:\n- path: /dev/nvidia0\n  type: CPH_AMD_GPU\n  type: NVIDIA_MPS\n  virtual_number: 4\n",
			[]string{`dev.yml:4: devices[0].type: set again (first at line 3); YAML keys must be unique`}},
		{"duplicate devices", "devices:\n- {path: /dev/nvidia0, type: NVIDIA_MPS, virtual_number: 4}\ndevices: []\n",
			[]string{`dev.yml:3: devices: set again (first at line 1); YAML keys must be unique`}},
		{"type with a dash", "devices:\n- path: /dev/nvidia0\n  type: NVIDIA-MPS\n  virtual_number: 4\n",
			[]string{`dev.yml:3: devices[0].type: "NVIDIA-MPS" is not NVIDIA_MPS: types are exact; write NVIDIA_MPS (an entry of another agent needs that agent's type)`}},
		{"type in lower case", "devices:\n- {path: /dev/nvidia0, type: nvidia_mps, virtual_number: 4}\n",
			[]string{`dev.yml:2: devices[0].type: "nvidia_mps" is not NVIDIA_MPS: types are exact; write NVIDIA_MPS (an entry of another agent needs that agent's type)`}},
		{"type one letter off", "devices:\n- {path: /dev/nvidia0, type: NVIDIA_MSP, virtual_number: 4}\n",
			[]string{`dev.yml:2: devices[0].type: "NVIDIA_MSP" is not NVIDIA_MPS: types are exact; write NVIDIA_MPS (an entry of another agent needs that agent's type)`}},
		{"type without underscore", "devices:\n- {path: /dev/nvidia0, type: NvidiaMPS, virtual_number: 4}\n",
			[]string{`dev.yml:2: devices[0].type: "NvidiaMPS" is not NVIDIA_MPS: types are exact; write NVIDIA_MPS (an entry of another agent needs that agent's type)`}},
		{"type a list", "devices:\n- path: /dev/nvidia0\n  type: [NVIDIA_MPS]\n  virtual_number: 4\n",
			[]string{`dev.yml:3: devices[0].type: want the single value NVIDIA_MPS, got a list`}},
		{"type quoted with spaces", "devices:\n- {path: /dev/nvidia0, type: \" NVIDIA_MPS\", virtual_number: 4}\n",
			[]string{`dev.yml:2: devices[0].type: " NVIDIA_MPS" is not NVIDIA_MPS: types are exact; write NVIDIA_MPS (an entry of another agent needs that agent's type)`}},
		{"unknown key", "devices:\n- path: /dev/nvidia0\n  type: NVIDIA_MPS\n  virtual_numbr: 4\n", []string{
			`dev.yml:2: devices[0].virtual_number: missing: say how many virtual devices to split the GPU into`,
			`dev.yml:4: devices[0].virtual_numbr: unknown key in an NVIDIA_MPS entry (it takes mps_qos, path, sharing, type and virtual_number)`,
		}},
		{"merge of a non-mapping", "devices:\n- <<: 3\n  path: /dev/nvidia0\n", []string{`dev.yml:2: devices[0]: line 2: a merge key (<<) takes a mapping or a list of mappings, got "3"`}},
		{"duplicate inside a merged mapping", "base: &b\n  type: NVIDIA_MPS\n  virtual_number: 2\n  virtual_number: 3\ndevices:\n- <<: *b\n  path: /dev/nvidia0\n",
			[]string{`dev.yml:4: devices[0].virtual_number: set again (first at line 3); YAML keys must be unique`}},
		// mps_qos (issue 13).
		{"not a mapping", entryHead + "  mps_qos: [0]\n", []string{`dev.yml:5: devices[0].mps_qos: want a mapping with latency (and reserve), got a list`}},
		{"no latency", entryHead + "  mps_qos:\n    reserve: 8\n", []string{`dev.yml:6: devices[0].mps_qos.latency: missing: list the slices for latency-bound tenants, e.g. [0]`}},
		{"latency a number", entryHead + "  mps_qos:\n    latency: 0\n", []string{`dev.yml:6: devices[0].mps_qos.latency: want a list of slice numbers such as [0], got "0"`}},
		{"slice not a number", entryHead + "  mps_qos:\n    latency: [0, first]\n", []string{`dev.yml:6: devices[0].mps_qos.latency[1]: want a whole number, got "first"`}},
		{"slice out of range", entryHead + "  mps_qos:\n    latency:\n    - 1\n    - 8\n", []string{`dev.yml:8: devices[0].mps_qos.latency[1]: slice 8 does not exist: virtual_number 8 makes slices 0 to 7`}},
		{"negative slice", entryHead + "  mps_qos: {latency: [-1]}\n", []string{`dev.yml:5: devices[0].mps_qos.latency[0]: slice -1 does not exist: virtual_number 8 makes slices 0 to 7`}},
		{"slice twice", entryHead + "  mps_qos:\n    latency:\n    - 3\n    - 1\n    - 3\n", []string{`dev.yml:9: devices[0].mps_qos.latency[2]: slice 3 is listed twice`}},
		{"reserve 0", entryHead + "  mps_qos:\n    latency: [0]\n    reserve: 0\n", []string{`dev.yml:7: devices[0].mps_qos.reserve: must be from 1 to 50 (percent of the SMs the batch slices leave free), got 0`}},
		{"reserve 51", entryHead + "  mps_qos: {latency: [0], reserve: 51}\n", []string{`dev.yml:5: devices[0].mps_qos.reserve: must be from 1 to 50 (percent of the SMs the batch slices leave free), got 51`}},
		{"reserve with a unit", entryHead + "  mps_qos: {latency: [0], reserve: 8%}\n", []string{`dev.yml:5: devices[0].mps_qos.reserve: want a whole number, got "8%"`}},
		{"unknown key", entryHead + "  mps_qos:\n    latency: [0]\n    priority: 1\n", []string{`dev.yml:7: devices[0].mps_qos.priority: unknown key in mps_qos (it takes latency and reserve)`}},
		{"key twice", entryHead + "  mps_qos:\n    latency: [0]\n    latency: [1]\n", []string{`dev.yml:7: devices[0].mps_qos.latency: set again (first at line 6); YAML keys must be unique`}},
		{"mps_qos twice", entryHead + "  mps_qos: {latency: [0]}\n  mps_qos: {latency: [1]}\n", []string{`dev.yml:6: devices[0].mps_qos: set again (first at line 5); YAML keys must be unique`}},
		{"misspelt key", entryHead + "  mps-qos: {latency: [0]}\n", []string{`dev.yml:5: devices[0].mps-qos: unknown key in an NVIDIA_MPS entry (it takes mps_qos, path, sharing, type and virtual_number)`}},
		{"every problem at once", entryHead + "  mps_qos:\n    latency: [x, 2]\n    reserve: 99\n    extra: 1\n", []string{
			`dev.yml:6: devices[0].mps_qos.latency[0]: want a whole number, got "x"`,
			`dev.yml:7: devices[0].mps_qos.reserve: must be from 1 to 50 (percent of the SMs the batch slices leave free), got 99`,
			`dev.yml:8: devices[0].mps_qos.extra: unknown key in mps_qos (it takes latency and reserve)`,
		}},
		{"huge list", entryHead + "  mps_qos: {latency: [" + strings.Repeat("0, ", 1100) + "0]}\n", []string{`dev.yml:5: devices[0].mps_qos.latency: lists 1101 slices; a GPU has at most 48`}},
		// sharing (issue 35).
		{"sharing misspelt", entryHead + "  sharing: claim\n", []string{`dev.yml:5: devices[0].sharing: "claim": want slices (fixed slices of memory.total / virtual_number, the default) or claims (Kubernetes claims of any size, at most virtual_number at once)`}},
		{"sharing in capitals", entryHead + "  sharing: CLAIMS\n", []string{`dev.yml:5: devices[0].sharing: "CLAIMS": want slices (fixed slices of memory.total / virtual_number, the default) or claims (Kubernetes claims of any size, at most virtual_number at once)`}},
		{"sharing a list", entryHead + "  sharing: [claims]\n", []string{`dev.yml:5: devices[0].sharing: want a single value, got a list`}},
		{"sharing empty", entryHead + "  sharing: \"\"\n", []string{`dev.yml:5: devices[0].sharing: "": want slices (fixed slices of memory.total / virtual_number, the default) or claims (Kubernetes claims of any size, at most virtual_number at once)`}},
		{"claims with mps_qos", entryHead + "  sharing: claims\n  mps_qos: {latency: [0]}\n", []string{`dev.yml:5: devices[0].mps_qos: mps_qos sorts a GPU's fixed slices into latency and batch classes; a GPU with sharing: claims has no fixed slices (drop one of the two)`}},
		{"sharing twice", entryHead + "  sharing: claims\n  sharing: slices\n", []string{`dev.yml:6: devices[0].sharing: set again (first at line 5); YAML keys must be unique`}},
		{"every error reported", head +
			"- type: NVIDIA_MPS\n  virtual_number: 0\n" + // 5-6
			"- type: CPH_AMD_GPU\n  virtual_number: 0\n" + // 7-8, not ours
			"- type: NVIDIA_MPS\n  path: /dev/nvidia3\n", // 9-10
			[]string{
				`dev.yml:5: devices[1].path: missing: an NVIDIA_MPS entry must name its GPU`,
				`dev.yml:6: devices[1].virtual_number: must be at least 1, got 0`,
				`dev.yml:9: devices[3].virtual_number: missing: say how many virtual devices to split the GPU into`,
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			df, err := ParseDevices("dev.yml", []byte(tc.in))
			if err == nil {
				t.Fatalf("no error; got %+v", df)
			}
			if got, want := err.Error(), strings.Join(tc.want, "\n"); got != want {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.File != "dev.yml" {
				t.Errorf("want a *config.Error naming the file, got %#v", err)
			}
		})
	}
}

func TestLoadDevicesMissing(t *testing.T) {
	_, err := LoadDevices(filepath.Join(t.TempDir(), "host_container_device.yml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("want fs.ErrNotExist, got %v", err)
	}
}
