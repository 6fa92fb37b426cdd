package e2e

import (
	"os"
	"strings"
	"testing"
)

func TestCheckConfigPrintsThePlan(t *testing.T) {
	e := newEnv(t, "http://127.0.0.1:1", "127.0.0.1:0")
	out, errOut, code := run(t, nil, "mps-daemon", "--config", e.hostConf, "--simulate", "8xH100", "check-config")
	if code != 0 {
		t.Fatalf("check-config on a good config: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:db:00.0", "20480", "27306", "4 GPUs, 10 virtual devices", "CPH_AMD_GPU"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(e.dir + "/pipe"); !os.IsNotExist(err) {
		t.Errorf("check-config must not touch MPS, but %s/pipe exists", e.dir)
	}
}

func TestCheckConfigNamesFileAndLine(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"malformed", "devices:\n- path: /dev/dri/renderD128\n  type: NVIDIA_MPS\n   virtual_number: 4\n", "devices.yml:4"},
		{"zero", "devices:\n- path: /dev/dri/renderD128\n  type: NVIDIA_MPS\n  virtual_number: 0\n", "devices.yml:4: devices[0].virtual_number"},
		{"no such gpu", "devices:\n- path: /dev/dri/renderD150\n  type: NVIDIA_MPS\n  virtual_number: 2\n", "devices.yml:2"},
		{"above client limit", "devices:\n- path: /dev/dri/renderD128\n  type: NVIDIA_MPS\n  virtual_number: 49\n", "48"},
		{"named twice", "devices:\n- path: /dev/dri/renderD128\n  type: NVIDIA_MPS\n  virtual_number: 2\n- path: 0000:18:00.0\n  type: NVIDIA_MPS\n  virtual_number: 2\n", "devices.yml:5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, "http://127.0.0.1:1", "127.0.0.1:0")
			if err := os.WriteFile(e.devices, []byte(c.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			_, errOut, code := run(t, nil, "mps-daemon", "--config", e.hostConf, "--simulate", "8xH100", "check-config")
			if code == 0 {
				t.Fatal("check-config accepted a broken config")
			}
			if !strings.Contains(errOut, c.want) {
				t.Errorf("error should contain %q, got:\n%s", c.want, errOut)
			}
		})
	}
}

func TestDaemonRefusesABrokenConfigAndChangesNothing(t *testing.T) {
	e := newEnv(t, "http://127.0.0.1:1", "127.0.0.1:0")
	if err := os.WriteFile(e.hostConf, []byte("enable_cuda_mps: true\ncuda_mps_replicas: many\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := run(t, nil, "mps-daemon", "--config", e.hostConf, "--simulate", "8xH100")
	if code == 0 || !strings.Contains(errOut, "host.conf:2: cuda_mps_replicas") {
		t.Fatalf("want exit 1 naming host.conf:2, got %d:\n%s", code, errOut)
	}
}
