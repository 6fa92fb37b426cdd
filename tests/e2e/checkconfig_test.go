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

// Finding 5, 6 and 7: check-config refuses what the daemon would refuse or
// misread, naming file, line and field; the daemon refuses the same at start.
func TestCheckConfigChecksEverythingTheDaemonChecks(t *testing.T) {
	t.Parallel()
	const mps = "devices:\n- path: /dev/dri/renderD128\n  type: NVIDIA_MPS\n  virtual_number: 4\n"
	cases := []struct {
		name      string
		conf      map[string]string // host.conf keys to set
		yaml      string            // the device YAML, when not mps
		want      string
		startFail bool // the daemon itself refuses to start on it too
	}{
		{name: "token file missing", conf: map[string]string{"mps_inventory_token_file": "/nonexistent/mps.token"},
			want: "reading mps_inventory_token_file: open /nonexistent/mps.token: no such file or directory", startFail: true},
		{name: "pipe root too long for a GPU's sockets", conf: map[string]string{"cuda_mps_pipe_directory": "/tmp/" + strings.Repeat("p", 70)},
			want: "cuda_mps_pipe_directory: too long for the MPS sockets under it", startFail: true},
		{name: "thread policy 120", conf: map[string]string{"mps_thread_percentage": "120"},
			want: `mps_thread_percentage: "120": want auto, even, none, K/N or a percentage from 1 to 100`, startFail: true},
		{name: "sync interval 1ns", conf: map[string]string{"mps_sync_interval": "1ns"},
			want: `mps_sync_interval: must be from 1s to 1h, got "1ns"`, startFail: true},
		{name: "control timeout 10h", conf: map[string]string{"mps_control_timeout": "10h"},
			want: `mps_control_timeout: must be from 1s to 2m, got "10h"`, startFail: true},
		{name: "health interval 1ms", conf: map[string]string{"mps_health_interval": "1ms"},
			want: `mps_health_interval: must be from 1s to 10m, got "1ms"`, startFail: true},
		{name: "duplicate key", yaml: mps + "  virtual_number: 1\n",
			want: "devices.yml:5: devices[0].virtual_number: set again (first at line 4)", startFail: true},
		{name: "type with a dash", yaml: strings.Replace(mps, "NVIDIA_MPS", "NVIDIA-MPS", 1),
			want: `devices.yml:3: devices[0].type: "NVIDIA-MPS" is not NVIDIA_MPS`, startFail: true},
		{name: "type a list", yaml: strings.Replace(mps, "NVIDIA_MPS", "[NVIDIA_MPS]", 1),
			want: "devices.yml:3: devices[0].type: want the single value NVIDIA_MPS, got a list", startFail: true},
		{name: "unknown key", yaml: mps + "  memory_limit: 8G\n",
			want: "devices.yml:5: devices[0].memory_limit: unknown key in an NVIDIA_MPS entry (it takes mps_qos, path, sharing, type and virtual_number)", startFail: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, "http://127.0.0.1:1", "127.0.0.1:0")
			for k, v := range c.conf {
				setKey(t, e.hostConf, k, v)
			}
			if c.yaml != "" {
				if err := os.WriteFile(e.devices, []byte(c.yaml), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, errOut, code := run(t, nil, "mps-daemon", "--config", e.hostConf, "--simulate", "8xH100", "check-config")
			if code == 0 || !strings.Contains(errOut, c.want) {
				t.Errorf("check-config: exit %d, want an error containing %q:\n%s", code, c.want, errOut)
			}
			if c.startFail {
				_, errOut, code := run(t, nil, "mps-daemon", "--config", e.hostConf, "--simulate", "8xH100")
				if code == 0 || !strings.Contains(errOut, c.want) {
					t.Errorf("the daemon: exit %d, want an error containing %q:\n%s", code, c.want, errOut)
				}
			}
		})
	}

	// A merge key is read as YAML defines it, not as another agent's entry.
	e := newEnv(t, "http://127.0.0.1:1", "127.0.0.1:0")
	merged := "mps: &mps {type: NVIDIA_MPS, virtual_number: 4}\ndevices:\n- <<: *mps\n  path: /dev/dri/renderD128\n- <<: *mps\n  path: /dev/dri/renderD129\n  virtual_number: 2\n"
	if err := os.WriteFile(e.devices, []byte(merged), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, nil, "mps-daemon", "--config", e.hostConf, "--simulate", "8xH100", "check-config")
	if code != 0 || !strings.Contains(out, "2 GPUs, 6 virtual devices") {
		t.Errorf("merge keys: exit %d\n%s%s", code, out, errOut)
	}
}
