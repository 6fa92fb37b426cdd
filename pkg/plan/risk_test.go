package plan

import (
	"testing"

	"yunion.io/x/mps-daemon/pkg/config"
)

// A change that takes every device off the host, or drops the device
// YAML's entries for cuda_mps_replicas, is a risk; a resize, a GPU taken
// out, or a move from replicas to the YAML is not.
func TestRisk(t *testing.T) {
	gpus, r := host(t)
	build := func(hc, dev string) *Plan {
		t.Helper()
		var df *config.DeviceFile
		if dev != "-" {
			df = devices(t, dev)
		}
		p, err := Build(hostConf(t, hc), df, gpus, r)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	on := "enable_cuda_mps: true\n"
	fourAndTwo := "devices:\n" + entry("0000:18:00.0", 4) + entry(uuidH100, 2)
	yaml := build(on, fourAndTwo)
	replicas := build(on, "")
	for _, tc := range []struct {
		name      string
		cur, next *Plan
		want      string
	}{
		{"resize", yaml, build(on, "devices:\n"+entry("0000:18:00.0", 2)+entry(uuidH100, 2)), ""},
		{"one GPU out", yaml, build(on, "devices:\n"+entry("0000:18:00.0", 4)), ""},
		{"sharing off", yaml, build("", fourAndTwo), "it would remove all 6 virtual devices of the host: enable_cuda_mps is not true (an empty host.conf turns sharing off)"},
		{"YAML emptied", yaml, replicas, "the device YAML names no GPU any more: every GPU would fall back to cuda_mps_replicas (10 each), where the device YAML's entries set N until now"},
		{"no device file any more", yaml, build(on, "-"), "the device YAML names no GPU any more: every GPU would fall back to cuda_mps_replicas (10 each), where the device YAML's entries set N until now"},
		{"replicas to YAML", replicas, yaml, ""},
		{"replicas stay", replicas, build(on+"cuda_mps_replicas: 4\n", ""), ""},
		{"replicas, sharing off", replicas, build("", ""), "it would remove all 30 virtual devices of the host: enable_cuda_mps is not true (an empty host.conf turns sharing off)"},
		{"nothing to nothing", build("", ""), build("", fourAndTwo), ""},
		{"no plan in force", nil, yaml, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Risk(tc.cur, tc.next); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}
