package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/cloudpods"
	tspodman "yunion.io/x/mps-daemon/internal/testsupport/podman"
	"yunion.io/x/mps-daemon/pkg/clientreport"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/gpu/nvmlsim"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
	"yunion.io/x/mps-daemon/pkg/status"
)

// tenantScript runs as a container's PID 1. It prints what the container
// sees of its device ("KEY value" lines), tries to change its identity from
// inside, then starts the processes a tenant would use to escape the cap:
// one that keeps its environment, one that drops the variable, one that
// names the neighbour's device ($OTHER), one chroot()ed away from the
// container's root, one chroot()ed 80 directories down, one in user and
// mount namespaces of its own with a tmpfs over the identity file's
// directory. Each prints its PID.
const tenantScript = `
g=$NVIDIA_VISIBLE_DEVICES; id=/run/yunion-mps/devices/$g; pipe=$CUDA_MPS_PIPE_DIRECTORY
echo "ENV $YUNION_MPS_VIRTUAL_DEVICE|$g|$pipe|$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT|$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
echo "IDENTITY $(cat $id)"
echo "MOUNT_IDENTITY $(grep " $id " /proc/self/mountinfo | cut -d' ' -f6)"
echo "MOUNT_PIPE $(grep " $pipe " /proc/self/mountinfo | cut -d' ' -f6)"
echo "PRIVILEGED $(stat -c '%F %t:%T' $pipe/control_privileged)"
echo "NODE $(stat -c '%F %t:%T' /dev/nvidia0 2>&1)"
(echo GPU-evil::9 > $id) 2>/dev/null; echo "WRITE $?"
umount $id 2>/dev/null; echo "UMOUNT $?"
mount -o remount,rw,bind $id 2>/dev/null; echo "REMOUNT $?"
touch $pipe/x 2>/dev/null; echo "PIPE_WRITE $?"
echo "IDENTITY_AFTER $(cat $id)"
mkdir -p /jail/bin && cp /bin/busybox /jail/bin/
sleep 1001 & echo "PID_keep $!"
env -u YUNION_MPS_VIRTUAL_DEVICE sleep 1002 & echo "PID_unset $!"
env YUNION_MPS_VIRTUAL_DEVICE=$OTHER sleep 1003 & echo "PID_rewrite $!"
chroot /jail /bin/busybox sleep 1004 & echo "PID_chroot $!"
deep=/deep; i=0; while [ $i -lt 80 ]; do deep=$deep/d; i=$((i+1)); done
mkdir -p $deep/bin && cp /bin/busybox $deep/bin/
chroot $deep /bin/busybox sleep 1006 & echo "PID_deep $!"
unshare -Urm sh -c 'mount -t tmpfs none /run/yunion-mps && exec sleep 1005' & echo "PID_hidden $!"
sleep 1; if kill -0 $! 2>/dev/null; then echo "HIDDEN ok"; else echo "HIDDEN failed"; fi
echo READY
wait
`

// TestPodmanContainersAreBilledByTheirIdentity: Debian 12's Podman 4.3.1
// consumes the daemon's CDI spec for a simulated host, and the containers'
// real processes, made MPS clients of the simulated host, are billed by the
// identity file their container was given, whatever they do to their
// environment or their view of the file system. The one that pushes its
// device over the cap is terminated (a real process, by the daemon); the
// neighbour device's process runs on; /status, `mps-daemon status` and
// /metrics show the figures enforcement used and each disagreement. A
// container given no device that forged the file is terminated (issue 23).
func TestPodmanContainersAreBilledByTheirIdentity(t *testing.T) {
	busybox := tspodman.Require(t)
	_, url := startInventory(t, "127.0.0.1:0")
	daemonAddr := freePort(t)
	e := newEnv(t, url, daemonAddr)
	appendConf(t, e, "mps_health_interval: 1s\nmps_accounting: enforce\n")
	d := startDaemon(t, e)
	st := waitStatus(t, daemonAddr, func(st status.Status) bool { return st.Ready && st.CDI != nil && st.CDI.Devices > 0 }, d)

	// GPU 0 (bus 18) is split in four: 20480 MiB each.
	g0 := st.GPUs[0]
	dev := func(i int) string { return fmt.Sprintf("%s::%d", g0.UUID, i) }
	const capMiB = 20480
	pm := newPodman(t, filepath.Join(e.dir, "cdi"))
	image := pm.Image(busybox)

	a := pm.start("tenant-a", "--device", "yunion.io/mps-gpu="+dev(0), "-e", "OTHER="+dev(1), image, "sh", "-c", tenantScript)
	b := pm.start("tenant-b", "--device", "yunion.io/mps-gpu="+dev(1), image, "sh", "-c", `sleep 1010 & echo "PID_other $!"; echo READY; wait`)
	// A container given no device, which put a copy of A's file where the
	// identity goes and names A's device in its environment: no device can
	// be established for it.
	c := pm.start("no-device", "-e", "YUNION_MPS_VIRTUAL_DEVICE="+dev(0), image, "sh", "-c",
		`mkdir -p /run/yunion-mps/devices && echo `+dev(0)+` > /run/yunion-mps/devices/`+g0.UUID+` && sleep 1020 & echo "PID_forger $!"; echo READY; wait`)
	a.ready(t)
	b.ready(t)
	c.ready(t)

	// What the container sees.
	want := map[string]string{
		"ENV":            fmt.Sprintf("%s|%s|%s|0=%dM|25", dev(0), g0.UUID, g0.PipeDirectory, capMiB),
		"IDENTITY":       dev(0),
		"IDENTITY_AFTER": dev(0),
		"PRIVILEGED":     "character special file 1:3",
	}
	if st, err := os.Stat(filepath.Join(e.dir, "state", "simulated-host", "dev", "nvidia0")); err == nil && st.Mode()&os.ModeCharDevice != 0 {
		want["NODE"] = "character special file 1:3" // injected from the spec's device node
	}
	for k, v := range want {
		if got, _ := a.field(k); got != v {
			t.Errorf("container sees %s = %q, want %q", k, got, v)
		}
	}
	for _, k := range []string{"MOUNT_IDENTITY", "MOUNT_PIPE"} {
		if got, _ := a.field(k); !strings.HasPrefix(got, "ro,") {
			t.Errorf("%s mounted %q, want read-only", k, got)
		}
	}
	for _, k := range []string{"WRITE", "UMOUNT", "REMOUNT", "PIPE_WRITE"} {
		if got, _ := a.field(k); got == "0" || got == "" {
			t.Errorf("%s from inside the container: exit %q, want a failure", k, got)
		}
	}

	// The processes become clients of the simulated GPU, with what the
	// driver would report for them.
	pids := map[string]int{}
	for _, r := range []string{"keep", "unset", "rewrite", "chroot", "deep", "hidden"} {
		if r == "hidden" {
			if v, _ := a.field("HIDDEN"); v != "ok" {
				t.Logf("user namespaces are not available in containers here: the hidden process is not tried")
				continue
			}
		}
		pids[r] = a.pid(t, r)
	}
	pids["other"] = b.pid(t, "other")
	pids["forger"] = c.pid(t, "forger")
	usedMiB := map[string]uint64{"keep": 4096, "unset": 2048, "rewrite": 2048, "chroot": 1024, "deep": 512, "hidden": 1024, "other": 8192, "forger": 512}
	simRoot := filepath.Join(e.dir, "state", "simulated-host")
	sim := mpssim.New(nil)
	setClients := func() {
		t.Helper()
		var procs []gpu.Process
		for r, pid := range pids {
			procs = append(procs, gpu.Process{PID: pid, UsedMemoryBytes: usedMiB[r] << 20})
		}
		if err := nvmlsim.WriteMPSProcesses(simRoot, gpu.UUID(g0.UUID), procs); err != nil {
			t.Fatal(err)
		}
	}
	for _, pid := range pids {
		if _, err := sim.AddClient(g0.PipeDirectory, pid); err != nil {
			t.Fatal(err)
		}
	}
	setClients()

	var sumA uint64
	for _, r := range []string{"keep", "unset", "rewrite", "chroot", "deep", "hidden"} {
		if _, ok := pids[r]; ok {
			sumA += usedMiB[r]
		}
	}
	// The forger, in a container whose device cannot be established, is
	// terminated under enforce (issue 23) as it connects (sim.AddClient
	// writes its control daemon's NEW CLIENT lines; issue 39), reported
	// with its decoy.
	eventually(t, "the forger terminated", func() (bool, string) { return !alive(pids["forger"]), d.Output() })
	for _, w := range []string{"cause=no_device", fmt.Sprintf("pid=%d", pids["forger"]), "did not make", "detected=connect"} {
		if !strings.Contains(d.Output(), w) {
			t.Errorf("the forger's termination is not logged with %q", w)
		}
	}
	delete(pids, "forger")
	setClients()
	st = waitStatus(t, daemonAddr, func(st status.Status) bool {
		d0 := device(st, dev(0))
		return d0 != nil && d0.Measured && uint64(d0.UsedBytes) == sumA<<20
	}, d)
	// Every process of A on A's device, the neighbour's alone on its own.
	if d1 := device(st, dev(1)); d1 == nil || d1.UsedBytes != 8192<<20 || d1.Clients != 1 {
		t.Errorf("%s: %+v; want the neighbour's 8192 MiB only", dev(1), d1)
	}
	if d0 := device(st, dev(0)); d0.Clients != len(pids)-1 || d0.OverCap {
		t.Errorf("%s: %+v; want all of A's processes, under the cap", dev(0), d0)
	}
	mism := map[int]clientreport.Mismatch{}
	for _, m := range st.Accounting.Mismatches {
		mism[m.PID] = m
	}
	for r, wantEnv := range map[string]string{"unset": "", "rewrite": dev(1), "hidden": dev(0)} {
		pid, ok := pids[r]
		if !ok {
			continue
		}
		m, ok := mism[pid]
		if !ok || m.Device != dev(0) || m.Environment != wantEnv {
			t.Errorf("%s (PID %d): mismatch %+v, want billed to %s, environment %q", r, pid, m, dev(0), wantEnv)
		}
	}
	if m, ok := mism[pids["hidden"]]; ok && m.Source != "ancestor" {
		t.Errorf("the hidden process is billed by %q, want through its ancestor", m.Source)
	}
	for _, r := range []string{"keep", "chroot", "deep", "other"} {
		if _, ok := mism[pids[r]]; ok {
			t.Errorf("%s (PID %d) reported as a mismatch", r, pids[r])
		}
	}

	// `mps-daemon status` and /metrics say the same.
	out, errOut, rc := run(t, nil, "mps-daemon", "status", "--config", e.hostConf)
	if rc != 0 {
		t.Fatalf("mps-daemon status: %s", errOut)
	}
	if !strings.Contains(out, fmt.Sprintf("%s  %d    %d", dev(0), capMiB, sumA)) || !strings.Contains(out, "disagreeing with the identity file") ||
		!strings.Contains(out, fmt.Sprintf("%d  %s  %s", pids["rewrite"], dev(0), dev(1))) {
		t.Errorf("mps-daemon status does not show what /status does:\n%s", out)
	}
	_, metricsBody := get("http://" + daemonAddr + "/metrics")
	for _, w := range []string{
		fmt.Sprintf(`mps_daemon_accounting_mismatched_clients{Hostname="e2e-host"} %d`, len(mism)),
		`mps_daemon_enforcement_steps_total{Hostname="e2e-host",cause="no_device",step="sigkill"} 1`,
	} {
		if !strings.Contains(metricsBody, w) {
			t.Errorf("/metrics lacks %s", w)
		}
	}

	// The liar grows 12 GiB: A's device goes over its cap, and the liar
	// (which grew most) is terminated: terminate_client, then SIGTERM after
	// the grace period, a real signal to a real process.
	usedMiB["rewrite"] += 12288
	setClients()
	eventually(t, "the liar terminated", func() (bool, string) { return !alive(pids["rewrite"]), d.Output() })
	for r, pid := range pids {
		if r != "rewrite" && !alive(pid) {
			t.Errorf("%s (PID %d) was terminated too", r, pid)
		}
	}
	if !strings.Contains(d.Output(), fmt.Sprintf("device_used_mib=%d", sumA+12288)) || !strings.Contains(d.Output(), fmt.Sprintf("pid=%d", pids["rewrite"])) {
		t.Errorf("the daemon's log does not show the enforcement on %d MiB", sumA+12288)
	}
	delete(pids, "rewrite")
	setClients()
	st = waitStatus(t, daemonAddr, func(st status.Status) bool {
		d0 := device(st, dev(0))
		return d0 != nil && uint64(d0.UsedBytes) == (sumA-2048)<<20 && !d0.OverCap
	}, d)
	if d1 := device(st, dev(1)); d1 == nil || d1.UsedBytes != 8192<<20 || d1.LastStep != "" {
		t.Errorf("%s: %+v; the neighbour's device must be untouched", dev(1), d1)
	}
	if err := syscall.Kill(pids["other"], 0); err != nil {
		t.Errorf("the neighbour's process: %v", err)
	}
}

func appendConf(t *testing.T, e *env, lines string) {
	t.Helper()
	f, err := os.OpenFile(e.hostConf, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(lines); err != nil {
		t.Fatal(err)
	}
}

// waitStatus polls the daemon's /status until ok.
func waitStatus(t *testing.T, addr string, ok func(status.Status) bool, d *proc) status.Status {
	t.Helper()
	var st status.Status
	eventually(t, "status", func() (bool, string) {
		code, body := get("http://" + addr + "/status")
		if code != http.StatusOK {
			return false, body
		}
		st = status.Status{}
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			return false, err.Error()
		}
		return ok(st), body + "\n" + tail(d.Output(), 3000)
	})
	return st
}

func device(st status.Status, name string) *status.Device {
	for i := range st.Devices {
		if st.Devices[i].Name == name {
			return &st.Devices[i]
		}
	}
	return nil
}

// tail is the end of a daemon's output for a failure message.
var tail = cloudpods.Tail
