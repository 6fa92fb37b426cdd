package plan

import (
	"bytes"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/golden"
	"yunion.io/x/mps-daemon/pkg/config"
)

func TestWrite(t *testing.T) {
	for _, tc := range []struct {
		golden, hostConf, devices string
	}{
		{
			golden:   "entries.golden",
			hostConf: "enable_cuda_mps: true\n",
			devices: "devices:\n" + entry("/dev/dri/renderD130", 3) +
				"- type: CPH_AOSP_BINDER\n  virtual_number: 16\n" + entry("/dev/dri/renderD128", 4) + "  mps_qos: {latency: [0]}\n" +
				"- path: /dev/dri/renderD129\n  type: NVIDIA_GPU_SHARE\n- path: /dev/vastai0\n",
		},
		{
			golden:   "claims.golden",
			hostConf: "enable_cuda_mps: true\nmps_thread_percentage: even\n",
			devices:  "devices:\n" + entry("/dev/dri/renderD130", 3) + entry("/dev/dri/renderD128", 8) + "  sharing: claims\n",
		},
		{
			golden:   "replicas.golden",
			hostConf: "enable_cuda_mps: true\ncuda_mps_replicas: 1\n",
		},
		{
			golden:   "disabled.golden",
			hostConf: "cuda_mps_replicas: 4\n",
			devices:  "devices:\n" + entry("/dev/dri/renderD128", 4),
		},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			gpus, r := host(t)
			var df *config.DeviceFile
			if tc.devices != "" {
				df = devices(t, tc.devices)
			}
			p, err := Build(hostConf(t, tc.hostConf), df, gpus, r)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := p.Write(&buf); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, tc.golden, buf.Bytes())
		})
	}
}
