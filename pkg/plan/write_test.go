package plan

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"yunion.io/x/mps-daemon/pkg/config"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

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
			golden(t, tc.golden, buf.Bytes())
		})
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it):\ngot\n%s\nwant\n%s", path, got, want)
	}
}
