package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/gpu/nvmlsim"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
	"yunion.io/x/mps-daemon/pkg/status"
)

// qosYAML shares the simulated host's first GPU (bus 18) in 8 with slice 0
// for a latency-bound tenant, and its last (bus db) in 2 without QoS.
const qosYAML = `devices:
- path: /dev/dri/renderD128
  type: NVIDIA_MPS
  virtual_number: 8
  mps_qos:
    latency: [0]
- path: /dev/nvidia7
  type: NVIDIA_MPS
  virtual_number: 2
`

// specEnvs reads each device's environment from the host's CDI spec.
func specEnvs(t *testing.T, cdiDir string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cdiDir, "yunion.io-mps-gpu.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Devices []struct {
			Name           string `yaml:"name"`
			ContainerEdits struct {
				Env []string `yaml:"env"`
			} `yaml:"containerEdits"`
		} `yaml:"devices"`
	}
	if err := yaml.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, d := range spec.Devices {
		out[d.Name] = d.ContainerEdits.Env
	}
	return out
}

func envOf(env []string, key string) string {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			return v
		}
	}
	return "(unset)"
}

// without is env less the variables named.
func without(env []string, keys ...string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, d := range keys {
			drop = drop || k == d
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}

// TestQoSOnASimulatedHost: mps_qos on the simulated 8 x H100 host, under
// the default thread policy (auto: 50% at N=8). Device 0 of the first GPU
// gets the even share, 12%, at normal priority, devices 1-7 13% below
// normal, in the CDI spec, the inventory rows, /status and `mps-daemon
// status`; the GPU's control daemon holds the largest, 13%, and priority
// 1, the other GPU's 100% and 0. Then four real processes on the host, MPS
// clients of the simulated GPU with their device's environment from the
// spec: a batch device's as given, a batch device's that raised its
// priority to 0, a batch device's started without its thread share (`env
// -u`: the control daemon's default holds it at 13%, no escape), a latency
// device's without any QoS variable. Under enforce the second is
// terminated by a real signal; the others run on.
func TestQoSOnASimulatedHost(t *testing.T) {
	_, url := startInventory(t, "127.0.0.1:0")
	daemonAddr := freePort(t)
	e := newEnv(t, url, daemonAddr)
	if err := os.WriteFile(e.devices, []byte(qosYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	setKey(t, e.hostConf, "mps_thread_percentage", "auto")
	appendConf(t, e, "mps_health_interval: 1s\nmps_accounting: enforce\n")
	d := startDaemon(t, e)
	st := waitStatus(t, daemonAddr, func(st status.Status) bool { return st.Ready && st.CDI != nil && st.CDI.Devices == 10 }, d)
	g0, g1 := st.GPUs[0], st.GPUs[1]
	if g0.PCI.String() != "0000:18:00.0" || g1.PCI.String() != "0000:db:00.0" {
		t.Fatalf("GPUs %s and %s, want 18 and db", g0.PCI, g1.PCI)
	}
	dev := func(g status.GPU, i int) string { return fmt.Sprintf("%s::%d", g.UUID, i) }
	type qos struct {
		threads, prio int
		class         string
	}
	want := map[string]qos{dev(g0, 0): {12, 0, "latency"}, dev(g1, 0): {100, 0, ""}, dev(g1, 1): {100, 0, ""}}
	for i := 1; i < 8; i++ {
		want[dev(g0, i)] = qos{13, 1, "batch"}
	}

	envs := specEnvs(t, filepath.Join(e.dir, "cdi"))
	for name, w := range want {
		env := envs[name]
		if envOf(env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") != fmt.Sprint(w.threads) || envOf(env, "CUDA_MPS_CLIENT_PRIORITY") != fmt.Sprint(w.prio) {
			t.Errorf("CDI spec %s: %v, want %d%% priority %d", name, env, w.threads, w.prio)
		}
	}
	rows := listAll(t, url)
	for _, r := range rows.IsolatedDevices {
		i := r.Addr[strings.LastIndexByte(r.Addr, '-')+1:]
		if w := want[r.DevicePath+"::"+i]; r.MPSThreadPercentage != w.threads {
			t.Errorf("inventory row %s: mps_thread_percentage %d, want %d", r.Addr, r.MPSThreadPercentage, w.threads)
		}
	}
	for name, w := range want {
		d := device(st, name)
		if d == nil || d.ThreadPercentage != w.threads || d.ClientPriority != w.prio || d.QoSClass != w.class {
			t.Errorf("/status %s: %+v, want %+v", name, d, w)
		}
	}
	sim := mpssim.New(nil)
	for _, c := range []struct {
		g       status.GPU
		threads float64
		prio    int
	}{{g0, 13, 1}, {g1, 100, 0}} {
		got, err := mps.NewController(sim, mps.Env{PipeDir: c.g.PipeDirectory}, 5*time.Second, nil).Defaults(t.Context())
		if err != nil || got.ThreadPercentage != c.threads || got.ClientPriority != c.prio || c.g.ClientPriority != c.prio {
			t.Errorf("GPU %s: control daemon holds %+v (%v), status says priority %d; want %.0f%% priority %d", c.g.PCI, got, err, c.g.ClientPriority, c.threads, c.prio)
		}
	}
	out, errOut, rc := run(t, nil, "mps-daemon", "status", "--config", e.hostConf)
	if rc != 0 || !strings.Contains(out, "latency [0], batch 13% prio 1") || !strings.Contains(out, "13%      batch, prio 1") {
		t.Errorf("mps-daemon status (%d, %s):\n%s", rc, errOut, out)
	}

	// Three host processes, given their devices' environment as a runtime
	// would; the accounting bills host processes by YUNION_MPS_VIRTUAL_DEVICE.
	start := func(env []string) int {
		t.Helper()
		cmd := exec.Command("sleep", "1000")
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }() // reaps it once signalled, so /proc forgets it
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
		return cmd.Process.Pid
	}
	keep := start(envs[dev(g0, 1)])
	escape := start(append(without(envs[dev(g0, 2)], "CUDA_MPS_CLIENT_PRIORITY"), "CUDA_MPS_CLIENT_PRIORITY=0"))
	unshared := start(without(envs[dev(g0, 3)], "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"))
	latency := start(without(envs[dev(g0, 0)], "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_CLIENT_PRIORITY"))
	var procs []gpu.Process
	for _, pid := range []int{keep, escape, unshared, latency} {
		if _, err := sim.AddClient(g0.PipeDirectory, pid); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, gpu.Process{PID: pid, UsedMemoryBytes: 1 << 30})
	}
	if err := nvmlsim.WriteMPSProcesses(filepath.Join(e.dir, "state", "simulated-host"), gpu.UUID(g0.UUID), procs); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the escape terminated", func() (bool, string) { return !alive(escape), tail(d.Output(), 3000) })
	for _, pid := range []int{keep, unshared, latency} {
		if !alive(pid) {
			t.Errorf("PID %d was terminated; only %d escapes its QoS", pid, escape)
		}
	}
	for _, w := range []string{"escapes its device's QoS or memory limit", fmt.Sprintf("pid=%d", escape), "cause=qos_escape",
		"CUDA_MPS_CLIENT_PRIORITY=0 raises it above its device's priority 1"} {
		if !strings.Contains(d.Output(), w) {
			t.Errorf("the daemon's log lacks %q", w)
		}
	}
	_, metrics := get("http://" + daemonAddr + "/metrics")
	// Checked as it connected (sim.AddClient writes its control daemon's
	// NEW CLIENT lines): SIGKILL at once, before any allocation.
	if !strings.Contains(metrics, `cause="qos_escape",step="sigkill"} 1`) || !strings.Contains(d.Output(), "detected=connect") {
		t.Errorf("/metrics does not count the termination:\n%s", metrics)
	}
}
