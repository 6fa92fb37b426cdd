package config

import (
	"reflect"
	"strings"
	"testing"
)

// entryHead is an NVIDIA_MPS entry of 8 slices, lines 1-4; tests add
// mps_qos from line 5.
const entryHead = "devices:\n- path: /dev/nvidia0\n  type: NVIDIA_MPS\n  virtual_number: 8\n"

func TestParseDevicesQoS(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     *MPSQoS
	}{
		{"none", entryHead, nil},
		{"empty value", entryHead + "  mps_qos:\n", nil},
		{"latency only", entryHead + "  mps_qos:\n    latency: [0]\n", &MPSQoS{Line: 6, LatencySlices: []int{0}, ReservePercent: 8}},
		{"block list, reserve, sorted", entryHead + "  mps_qos:\n    reserve: 12\n    latency:\n    - 7\n    - 2\n", &MPSQoS{Line: 6, LatencySlices: []int{2, 7}, ReservePercent: 12}},
		{"flow mapping, quoted numbers", entryHead + "  mps_qos: {latency: [\"3\"], reserve: \"4\"}\n", &MPSQoS{Line: 5, LatencySlices: []int{3}, ReservePercent: 4}},
		{"empty list: no latency slices", entryHead + "  mps_qos: {latency: []}\n", &MPSQoS{Line: 5, ReservePercent: 8}},
		{"every slice", "devices:\n- {path: /dev/nvidia0, type: NVIDIA_MPS, virtual_number: 2, mps_qos: {latency: [1, 0]}}\n", &MPSQoS{Line: 2, LatencySlices: []int{0, 1}, ReservePercent: 8}},
		{"merged", "q: &q {latency: [1]}\n" + entryHead + "  mps_qos: *q\n", &MPSQoS{Line: 1, LatencySlices: []int{1}, ReservePercent: 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			df, err := ParseDevices("dev.yml", []byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if len(df.Entries) != 1 || !reflect.DeepEqual(df.Entries[0].QoS, tc.want) {
				t.Errorf("got %+v, want QoS %+v", df.Entries, tc.want)
			}
		})
	}
}

func TestParseDevicesQoSErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
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
		{"misspelt key", entryHead + "  mps-qos: {latency: [0]}\n", []string{`dev.yml:5: devices[0].mps-qos: unknown key in an NVIDIA_MPS entry (it takes mps_qos, path, type and virtual_number)`}},
		{"every problem at once", entryHead + "  mps_qos:\n    latency: [x, 2]\n    reserve: 99\n    extra: 1\n", []string{
			`dev.yml:6: devices[0].mps_qos.latency[0]: want a whole number, got "x"`,
			`dev.yml:7: devices[0].mps_qos.reserve: must be from 1 to 50 (percent of the SMs the batch slices leave free), got 99`,
			`dev.yml:8: devices[0].mps_qos.extra: unknown key in mps_qos (it takes latency and reserve)`,
		}},
		{"huge list", entryHead + "  mps_qos: {latency: [" + strings.Repeat("0, ", 1100) + "0]}\n", []string{`dev.yml:5: devices[0].mps_qos.latency: lists 1101 slices; a GPU has at most 48`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			df, err := ParseDevices("dev.yml", []byte(tc.in))
			if err == nil {
				t.Fatalf("no error; got %+v", df)
			}
			if got, want := err.Error(), strings.Join(tc.want, "\n"); got != want {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// Other agents' entries may have keys of the same name; they are theirs.
func TestQoSOfOtherAgentsIsNotOurs(t *testing.T) {
	df, err := ParseDevices("dev.yml", []byte("devices:\n- {type: NVIDIA_GPU_SHARE, path: /dev/nvidia1, mps_qos: whatever}\n"))
	if err != nil || len(df.Skipped) != 1 || df.Skipped[0].QoS != nil {
		t.Errorf("got %+v, %v", df, err)
	}
}
