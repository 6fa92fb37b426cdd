package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	tspodman "yunion.io/x/mps-daemon/internal/testsupport/podman"
	"yunion.io/x/mps-daemon/internal/testsupport/viewkit"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/gpu/nvmlsim"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/view"
)

// TestPodmanContainersSeeTheirSliceAsTheirGPU: Debian 12's Podman runs
// containers of a simulated host's virtual device with the daemon's CDI
// spec; inside, the project's stand-ins for libcuda.so.1 and
// libnvidia-ml.so.1 are asked how much memory the GPU has, each way real
// software asks (linked, dlopen and dlsym, cuGetProcAddress as the CUDA
// runtime does, Python's ctypes as pynvml does), also under `env -i` and
// with the image's own LD_PRELOAD: every answer is the device's cap as the
// total and, as free, the cap less what the device's processes use,
// bounded by what the GPU really has free; another GPU's answers pass
// through. The device's processes are measured by the daemon (a static
// program among them, which cannot load the library, is reported). A
// resize changes what a new process sees; with mps_view_library empty the
// spec has no preload list and containers see the whole GPU.
func TestPodmanContainersSeeTheirSliceAsTheirGPU(t *testing.T) {
	tspodman.Require(t)
	kit := buildViewKit(t)
	_, url := startInventory(t, "127.0.0.1:0")
	daemonAddr := freePort(t)
	e := newEnv(t, url, daemonAddr)
	setKey(t, e.hostConf, "mps_view_library", kit.Library)
	appendConf(t, e, "mps_health_interval: 1s\nmps_accounting: report\n")
	d := startDaemon(t, e)
	st := waitStatus(t, daemonAddr, func(st status.Status) bool {
		return st.Ready && st.CDI != nil && st.CDI.Devices > 0 && st.View != nil && st.View.State == status.ViewOn
	}, d)
	g0, g1 := st.GPUs[0], st.GPUs[1]
	dev := g0.UUID + "::0"
	capBytes := uint64(device(st, dev).MemoryLimit)
	realTotal := uint64(g0.MemoryTotal)
	const gib = 1 << 30

	// The stand-ins' GPUs: the device's, with plenty free, and another.
	gpus := func(free0 uint64) string {
		f := filepath.Join(t.TempDir(), "gpus")
		if err := viewkit.GPUs(f, viewkit.GPU{UUID: g0.UUID, Total: realTotal, Free: free0},
			viewkit.GPU{UUID: g1.UUID, Total: uint64(g1.MemoryTotal), Free: uint64(g1.MemoryTotal) - gib}); err != nil {
			t.Fatal(err)
		}
		return f
	}
	plenty := gpus(realTotal - gib)
	pm := newPodman(t, filepath.Join(e.dir, "cdi"))
	image := pm.Import("glibc", viewkit.WriteGlibcRootfs)
	runIn := func(name, gpusFile string, extra []string, cmd ...string) string {
		args := append([]string{"run", "--rm", "--network", "none", "--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
			"--device", "yunion.io/mps-gpu=" + name}, kit.Mounts(gpusFile)...)
		args = append(append(args, extra...), image)
		return pm.Run(append(args, cmd...)...)
	}
	// check says GPU 0's answers in out are total and free, by each of
	// ways (cuda and nvml; cuGetProcAddress's cuda only).
	check := func(what, out string, total, free uint64, ways ...string) {
		t.Helper()
		as, errs := viewkit.Parse(out)
		for _, e := range errs {
			t.Errorf("%s: %s", what, e)
		}
		problems, seen := viewkit.Check(as, viewkit.Want{UUID: g0.UUID, Total: total, Free: free, View: total != realTotal})
		for _, p := range problems {
			t.Errorf("%s: %s", what, p)
		}
		for _, w := range ways {
			want := 2
			if strings.HasPrefix(w, "gpa_") {
				want = 1
			}
			if seen[w] != want {
				t.Errorf("%s: %d answers by way %s, want %d:\n%s", what, seen[w], w, want, out)
			}
		}
		// The other GPU has no view in this container: its own answers.
		if problems, _ := viewkit.Check(as, viewkit.Want{UUID: g1.UUID, Total: uint64(g1.MemoryTotal), Free: uint64(g1.MemoryTotal) - gib}); len(problems) > 0 {
			t.Errorf("%s: the other GPU: %v", what, problems)
		}
	}

	// A new device's container: the cap, all of it free.
	out := runIn(dev, plenty, nil, "sh", "-c", "/opt/t/viewtest-linked linked; /opt/t/viewtest dlsym; /opt/t/viewtest procaddr; "+
		"LD_LIBRARY_PATH=/opt/t python3 /opt/t/ctypes_check.py; /opt/t/viewtest maps")
	check("an idle device", out, capBytes, capBytes, "linked", "dlsym", "gpa_v2@12000", "gpa_self@13000", "gpa_v1@11030", "ctypes")
	if !strings.Contains(out, "maps view=1 own=0") {
		t.Errorf("the library is not loaded, or the image's own preload list is not hidden:\n%s", out)
	}
	// Whatever the environment says.
	out = runIn(dev, plenty, nil, "env", "-i", "/opt/t/viewtest", "dlsym")
	check("env -i", out, capBytes, capBytes, "dlsym")
	out = runIn(dev, plenty, []string{"-e", "LD_PRELOAD=/opt/t/libown.so"}, "sh", "-c", "/opt/t/viewtest dlsym; /opt/t/viewtest maps")
	check("the image's LD_PRELOAD", out, capBytes, capBytes, "dlsym")
	if !strings.Contains(out, "maps view=1 own=1") {
		t.Errorf("with the image's LD_PRELOAD both libraries should be loaded:\n%s", out)
	}
	// The GPU with less free than the slice: its real free.
	out = runIn(dev, gpus(gib), nil, "/opt/t/viewtest", "dlsym")
	check("a GPU with 1 GiB free", out, capBytes, gib, "dlsym")

	// The device's processes: a dynamically linked one (with the view)
	// and a static one (without), clients of the simulated GPU.
	c := pm.start("tenant", append(append([]string{"--device", "yunion.io/mps-gpu=" + dev}, kit.Mounts(plenty)...), image,
		"sh", "-c", `/usr/bin/sleep 1001 & echo "PID_dynamic $!"; /usr/bin/busybox sleep 1002 & echo "PID_static $!"; echo READY; wait`)...)
	c.ready(t)
	dynamic, static := c.pid(t, "dynamic"), c.pid(t, "static")
	simRoot := filepath.Join(e.dir, "state", "simulated-host")
	if err := nvmlsim.WriteMPSProcesses(simRoot, gpu.UUID(g0.UUID), []gpu.Process{{PID: dynamic, UsedMemoryBytes: 2 * gib}, {PID: static, UsedMemoryBytes: gib}}); err != nil {
		t.Fatal(err)
	}
	st = waitStatus(t, daemonAddr, func(st status.Status) bool {
		d := device(st, dev)
		return d != nil && d.Measured && d.UsedBytes == 3*gib && st.Accounting != nil && len(st.Accounting.WithoutView) == 1
	}, d)
	if w := st.Accounting.WithoutView[0]; w.PID != static || w.Device != dev || device(st, dev).WithoutView != 1 {
		t.Errorf("without the view: %+v, device %+v; want the static process alone", st.Accounting.WithoutView, device(st, dev))
	}
	viewDir := filepath.Join(e.dir, "state", "view", g0.UUID+".0")
	if b, err := os.ReadFile(filepath.Join(viewDir, view.MemoryFile)); err != nil || !strings.Contains(string(b), fmt.Sprintf("used_bytes %d\n", 3*gib)) {
		t.Errorf("the device's view file: %q %v", b, err)
	}
	out = pm.Run("exec", c.id(), "/opt/t/viewtest", "dlsym")
	check("a device using 3 GiB", out, capBytes, capBytes-3*gib, "dlsym")
	out, _, rc := run(t, nil, "mps-daemon", "status", "--config", e.hostConf)
	if rc != 0 || !strings.Contains(out, "1 client without the view") || !strings.Contains(out, fmt.Sprintf("%d  ", static)) {
		t.Errorf("mps-daemon status does not show the client without the view:\n%s", out)
	}
	_, metricsBody := get("http://" + daemonAddr + "/metrics")
	for _, w := range []string{`mps_daemon_view_state{Hostname="e2e-host",state="on"} 1`, `mps_daemon_accounting_clients_without_view{Hostname="e2e-host"} 1`} {
		if !strings.Contains(metricsBody, w) {
			t.Errorf("/metrics lacks %s", w)
		}
	}

	// A resize: GPU 0 in two. A new process of the running container sees
	// the new cap.
	resized := strings.Replace(fmt.Sprintf(devicesYAML, 3), "virtual_number: 4", "virtual_number: 2", 1)
	saveAtomic(t, e.devices, resized)
	newCap := uint64((g0.MemoryTotal.MiB() / 2).Bytes())
	waitStatus(t, daemonAddr, func(st status.Status) bool {
		d := device(st, dev)
		return d != nil && uint64(d.MemoryLimit) == newCap
	}, d)
	eventually(t, "the view of the resized device", func() (bool, string) {
		b, _ := os.ReadFile(filepath.Join(viewDir, view.MemoryFile))
		return strings.Contains(string(b), fmt.Sprintf("total_bytes %d\n", newCap)), string(b)
	})
	out = pm.Run("exec", c.id(), "/opt/t/viewtest", "dlsym")
	check("after the resize", out, newCap, newCap-3*gib, "dlsym")

	// The view off: the spec has no preload list, a container sees the
	// whole GPU (and its image's own preload list is its own again).
	setKey(t, e.hostConf, "mps_view_library", `""`)
	waitStatus(t, daemonAddr, func(st status.Status) bool { return st.View != nil && st.View.State == status.ViewOff }, d)
	eventually(t, "the spec without the view", func() (bool, string) {
		b, _ := os.ReadFile(filepath.Join(e.dir, "cdi", "yunion.io-mps-gpu.yaml"))
		return !strings.Contains(string(b), view.ContainerPreload) && strings.Contains(string(b), dev), string(b)
	})
	out = runIn(dev, plenty, nil, "sh", "-c", "/opt/t/viewtest dlsym; /opt/t/viewtest maps")
	check("the view off", out, realTotal, realTotal-gib, "dlsym")
	if !strings.Contains(out, "maps view=0 own=1") {
		t.Errorf("with the view off:\n%s", out)
	}
}
