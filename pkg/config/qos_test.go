package config

import (
	"reflect"
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
		{"latency only: the default reserve, 8", entryHead + "  mps_qos:\n    latency: [0]\n", &MPSQoS{Line: 6, LatencySlices: []int{0}, ReservePercent: 8}},
		{"block list, reserve, sorted", entryHead + "  mps_qos:\n    reserve: 12\n    latency:\n    - 7\n    - 2\n", &MPSQoS{Line: 6, LatencySlices: []int{2, 7}, ReservePercent: 12}},
		{"flow mapping, quoted numbers", entryHead + "  mps_qos: {latency: [\"3\"], reserve: \"4\"}\n", &MPSQoS{Line: 5, LatencySlices: []int{3}, ReservePercent: 4}},
		{"empty list: no latency slices", entryHead + "  mps_qos: {latency: []}\n", &MPSQoS{Line: 5, ReservePercent: DefaultQoSReservePercent}},
		{"every slice", "devices:\n- {path: /dev/nvidia0, type: NVIDIA_MPS, virtual_number: 2, mps_qos: {latency: [1, 0]}}\n", &MPSQoS{Line: 2, LatencySlices: []int{0, 1}, ReservePercent: DefaultQoSReservePercent}},
		{"merged", "q: &q {latency: [1]}\n" + entryHead + "  mps_qos: *q\n", &MPSQoS{Line: 1, LatencySlices: []int{1}, ReservePercent: DefaultQoSReservePercent}},
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

// Other agents' entries may have keys of the same name; they are theirs.
func TestQoSOfOtherAgentsIsNotOurs(t *testing.T) {
	df, err := ParseDevices("dev.yml", []byte("devices:\n- {type: NVIDIA_GPU_SHARE, path: /dev/nvidia1, mps_qos: whatever}\n"))
	if err != nil || len(df.Skipped) != 1 || df.Skipped[0].QoS != nil {
		t.Errorf("got %+v, %v", df, err)
	}
}

// sharing: claims or slices is read; without it an entry is fixed slices
// (Sharing "", which Claims() says is not claims).
func TestParseDevicesSharing(t *testing.T) {
	for in, want := range map[string]Sharing{
		entryHead:                            "",
		entryHead + "  sharing: slices\n":    SharingSlices,
		entryHead + "  sharing: claims\n":    SharingClaims,
		entryHead + "  sharing: ' claims'\n": SharingClaims,
	} {
		df, err := ParseDevices("dev.yml", []byte(in))
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if got := df.Entries[0].Sharing; got != want || got.Claims() != (want == SharingClaims) {
			t.Errorf("%q: sharing %q (claims %v), want %q", in, got, got.Claims(), want)
		}
	}
}
