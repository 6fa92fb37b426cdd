package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/gpu/nvmlsim"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/vdev"
	"yunion.io/x/mps-daemon/pkg/view"
)

// TestViewUsedBytesSurviveARestart: a device holds 5 GiB (a client of the
// simulated GPU that names it); the daemon writes used_bytes 5 GiB in its
// view file. Across a restart of the daemon the file keeps saying so,
// also while the new daemon cannot measure the GPU (NVML fails to list
// its clients, as for a GPU whose listing is broken), so software in the
// device's containers that sizes itself from free is never told the
// device is empty; once the GPU is measured again (the client gone), the
// file says what was measured.
func TestViewUsedBytesSurviveARestart(t *testing.T) {
	_, url := startInventory(t, "127.0.0.1:0")
	daemonAddr := freePort(t)
	e := newEnv(t, url, daemonAddr)
	// The daemon only needs a regular file where the library is.
	lib := filepath.Join(e.dir, view.LibraryFile)
	if err := os.WriteFile(lib, []byte("the library's stand-in\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	setKey(t, e.hostConf, "mps_view_library", lib)
	appendConf(t, e, "mps_health_interval: 1s\nmps_accounting: report\n")
	d := startDaemon(t, e)
	viewOn := func(st status.Status) bool {
		return st.Ready && st.View != nil && st.View.State == status.ViewOn && st.View.Devices > 0
	}
	st := waitStatus(t, daemonAddr, viewOn, d)
	g0 := st.GPUs[0]
	dev := g0.UUID + "::0"
	const gib = 1 << 30

	// A client of device 0 holding 5 GiB.
	job := exec.Command("sleep", "1070")
	job.Env = []string{"PATH=/usr/bin:/bin", vdev.EnvVar + "=" + dev}
	if err := job.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { job.Process.Kill(); job.Wait() })
	if _, err := mpssim.New(nil).AddClient(g0.PipeDirectory, job.Process.Pid); err != nil {
		t.Fatal(err)
	}
	simRoot := filepath.Join(e.dir, "state", "simulated-host")
	if err := nvmlsim.WriteMPSProcesses(simRoot, gpu.UUID(g0.UUID), []gpu.Process{{PID: job.Process.Pid, UsedMemoryBytes: 5 * gib}}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(e.dir, "state", "view", g0.UUID+".0", view.MemoryFile)
	says := func(used uint64) func() (bool, string) {
		return func() (bool, string) {
			b, err := os.ReadFile(file)
			m, perr := view.Parse(b)
			return err == nil && perr == nil && uint64(m.Used) == used, fmt.Sprintf("%s: %q %v %v", file, b, err, perr)
		}
	}
	eventually(t, "the view file says 5 GiB used", says(5*gib))

	// The restart, with the GPU's clients unlistable from then on.
	if err := d.Stop(t); err != nil {
		t.Fatalf("daemon exit on SIGTERM: %v\n%s", err, d.Output())
	}
	if ok, why := says(5 * gib)(); !ok {
		t.Fatalf("between the two daemons: %s", why)
	}
	if err := os.WriteFile(nvmlsim.MPSProcessesPath(simRoot, gpu.UUID(g0.UUID)), []byte("not a list\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d2 := startDaemon(t, e)
	// Its views made (the first reconcile), and an accounting pass over,
	// which found the GPU unmeasurable (its warning twice: the first pass,
	// with what it writes into the views, is over when the second
	// begins): the file must still say 5 GiB.
	waitStatus(t, daemonAddr, viewOn, d2)
	eventually(t, "two accounting passes that cannot list the GPU", func() (bool, string) {
		return strings.Count(d2.Output(), "those GPUs go unmeasured this pass") >= 2, d2.Output()
	})
	if dv := device(waitStatus(t, daemonAddr, viewOn, d2), dev); dv == nil || dv.Measured {
		t.Fatalf("the device should be unmeasured: %+v", dv)
	}
	if ok, why := says(5 * gib)(); !ok {
		t.Errorf("after the restart, before the device is measured again: %s", why)
	}

	// Measured again: the client is gone, nothing is used.
	if err := nvmlsim.WriteMPSProcesses(simRoot, gpu.UUID(g0.UUID), nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the view file follows the new measurement", says(0))
}
