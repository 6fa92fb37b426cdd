package k8s

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/process"
)

// daemonBin is mps-daemon, built from the main module in TestMain.
var daemonBin string

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "mps-k8s-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	daemonBin = filepath.Join(dir, "mps-daemon")
	// Built by the daemon's own module (its go.mod) with the Kubernetes
	// mode, as make build-kubernetes builds it.
	bin := process.Binary{Dir: filepath.Join("..", ".."), Package: "./cmd/mps-daemon", Tags: "kubernetes", CGO: true}
	if err := process.Build(bin, daemonBin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// host is one node's directory: host.conf, the device YAML, MPS pipes,
// state, the CDI spec, the kubelet's plugin directories.
type host struct {
	dir, hostConf, devices, cdiDir      string
	pluginDir, registrarDir, kubeconfig string
}

// newHost makes a node's directory; extra are more host.conf lines.
func newHost(t *testing.T, kubeconfig string, extra ...string) *host {
	t.Helper()
	// MPS socket paths must stay under 107 bytes: a short root.
	dir, err := os.MkdirTemp("", "k8s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	h := &host{dir: dir, hostConf: filepath.Join(dir, "host.conf"), devices: filepath.Join(dir, "devices.yml"), cdiDir: filepath.Join(dir, "cdi"),
		pluginDir: filepath.Join(dir, "kubelet", "plugins", driverName), registrarDir: filepath.Join(dir, "kubelet", "plugins_registry"), kubeconfig: kubeconfig}
	conf := fmt.Sprintf(`enable_cuda_mps: true
container_device_config_file: %[1]s/devices.yml
cuda_mps_pipe_directory: %[1]s/pipe
cuda_mps_log_directory: %[1]s/log
mps_state_directory: %[1]s/state
mps_cdi_directory: %[1]s/cdi
mps_thread_percentage: even
mps_host_name: %[2]s
mps_listen_address: 127.0.0.1:0
mps_sync_interval: 1h
`, dir, nodeName)
	for _, l := range extra {
		conf += l + "\n"
	}
	if err := os.WriteFile(h.hostConf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return h
}

// writeDevices shares GPU 0 in n0 (not at all when 0) and GPU 1 in n1.
func (h *host) writeDevices(t *testing.T, n0, n1 int) {
	t.Helper()
	if err := os.WriteFile(h.devices, []byte(devicesYAML(n0, n1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeDevicesText writes the device YAML as it is.
func (h *host) writeDevicesText(t *testing.T, text string) {
	t.Helper()
	if err := os.WriteFile(h.devices, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// daemon is `mps-daemon kubernetes` on the simulated host
// (internal/testsupport/process).
type daemon struct{ *process.Proc }

// start starts the daemon; when the test ends it is stopped (30 s on
// SIGTERM, then SIGKILL, which fails nothing here).
func (h *host) start(t *testing.T) *daemon {
	t.Helper()
	return &daemon{process.Start(t, process.Options{Grace: 30 * time.Second, Lenient: true}, daemonBin,
		"--config", h.hostConf, "--simulate", "8xH100", "kubernetes",
		"--node-name", nodeName, "--kubeconfig", h.kubeconfig, "--plugin-dir", h.pluginDir, "--registrar-dir", h.registrarDir)}
}

// eventually polls cond until it holds, for at most two minutes (the
// machine is shared: the API server and the daemon are slow to start).
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	process.Eventually(t, 2*time.Minute, what, cond)
}
