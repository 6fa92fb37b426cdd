package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// setKey sets key in host.conf, replacing its line or adding one, and saves
// the file atomically.
func setKey(t *testing.T, path, key, value string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	line := key + ": " + value
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + `:.*$`)
	s := string(b)
	if re.MatchString(s) {
		s = re.ReplaceAllLiteralString(s, line)
	} else {
		s += line + "\n"
	}
	saveAtomic(t, path, s)
}

func saveAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// Anything but a regular file, or a file too big, named as the device YAML
// is a configuration error naming it: the daemon keeps running its last good
// configuration and its loop goes on (finding 2 and 3 of issue 12: a FIFO
// hung it for good while it kept saying ready; /dev/zero killed it).
func TestConfigFilesThatAreNotRegularFiles(t *testing.T) {
	t.Parallel()
	h := startHost(t, fmt.Sprintf(devicesYAML, 3), "")
	good, err := os.ReadFile(h.devices)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		make       func(path string) error
	}{
		{"fifo", "is a FIFO (named pipe), not a regular file", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		{"dev zero", "is a character device, not a regular file", func(p string) error { return os.Symlink("/dev/zero", p) }},
		{"directory", "is a directory, not a regular file", func(p string) error { return os.Mkdir(p, 0o755) }},
		{"200 MB of comments", "is 209715200 bytes, more than the 1 MiB a configuration file may have", func(p string) error {
			if err := os.WriteFile(p, []byte("# comment\n"), 0o644); err != nil {
				return err
			}
			return os.Truncate(p, 200<<20)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A new file of that kind where the YAML was (what a watcher of
			// the directory sees as a remove and a create).
			tmp := filepath.Join(h.dir, "replacement")
			if err := tc.make(tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(h.devices); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, h.devices); err != nil {
				t.Fatal(err)
			}
			n := reconciles(h.daemon)
			eventually(t, "the config error", func() (bool, string) {
				st := h.status(t)
				return strings.Contains(st.ConfigError, h.devices+": "+tc.want), st.ConfigError
			})
			// The loop goes on: it reconciles and answers, ready.
			eventually(t, "reconciles after the error", func() (bool, string) { return reconciles(h.daemon) > n+1, "" })
			for _, path := range []string{"/readyz", "/healthz"} {
				if code, body := get("http://" + h.daemonAddr + path); code != http.StatusOK {
					t.Errorf("%s: %d %s", path, code, body)
				}
			}
			if devs, err := h.devicesByAddr(t); err != nil || len(devs) != 10 {
				t.Errorf("devices changed: %d %v", len(devs), err)
			}
			// check-config says the same, and returns.
			_, errOut, code := run(t, nil, "mps-daemon", "--config", h.hostConf, "--simulate", "8xH100", "check-config")
			if code == 0 || !strings.Contains(errOut, h.devices+": "+tc.want) {
				t.Errorf("check-config: exit %d: %s", code, errOut)
			}
			if err := os.RemoveAll(h.devices); err != nil {
				t.Fatal(err)
			}
			saveAtomic(t, h.devices, string(good))
			eventually(t, "the error cleared by the good file", func() (bool, string) {
				st := h.status(t)
				return st.ConfigError == "", st.ConfigError
			})
			if st := h.status(t); st.ConfigGeneration != 1 {
				t.Errorf("the good file back counts as a new configuration: generation %d", st.ConfigGeneration)
			}
		})
	}
	if h.daemon.Exited() {
		t.Fatalf("the daemon exited:\n%s", h.daemon.Output())
	}
}

// host.conf as a FIFO: the daemon refuses to start, at once, naming it.
func TestDaemonRefusesAHostConfThatIsAFIFO(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "host.conf")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--config", fifo, "--simulate", "8xH100"}, {"--config", fifo, "--simulate", "8xH100", "check-config"}} {
		_, errOut, code := run(t, nil, "mps-daemon", args...)
		if code == 0 || !strings.Contains(errOut, fifo+": is a FIFO (named pipe), not a regular file") {
			t.Errorf("%v: exit %d: %s", args, code, errOut)
		}
	}
}

// Finding 8 and the hold: a truncated host.conf (sharing off) or an emptied
// device YAML (every GPU to cuda_mps_replicas) is not applied on its own.
// It is shown, and applied only when the files held it for
// mps_reload_hold_time; restoring the files cancels it.
func TestRiskyReloadsAreHeldBack(t *testing.T) {
	t.Parallel()
	h := startHost(t, fmt.Sprintf(devicesYAML, 3), "mps_reload_hold_time: 3s\n")
	held := h.attach(t, "vm-1", "18:00.0-1")
	goodConf, err := os.ReadFile(h.hostConf)
	if err != nil {
		t.Fatal(err)
	}

	// host.conf truncated to 0 bytes, left for less than the hold time.
	if err := os.Truncate(h.hostConf, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the held change in /status", func() (bool, string) {
		st := h.status(t)
		return st.ConfigHeld != nil, fmt.Sprint(st.ConfigHeld)
	})
	st := h.status(t)
	if !strings.Contains(st.ConfigHeld.Reason, "remove all 10 virtual devices") || st.ConfigHeld.ApplyAt.Sub(st.ConfigHeld.Since) != 3*time.Second {
		t.Errorf("held: %+v", st.ConfigHeld)
	}
	if _, m := get("http://" + h.daemonAddr + "/metrics"); !strings.Contains(m, `mps_daemon_config_held{Hostname="e2e-host"} 1`) {
		t.Error("mps_daemon_config_held is not 1")
	}
	h.daemon.logs(t, "configuration change held back")
	if err := os.WriteFile(h.hostConf, goodConf, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the hold cancelled", func() (bool, string) {
		st := h.status(t)
		return st.ConfigHeld == nil, fmt.Sprint(st.ConfigHeld)
	})
	time.Sleep(3 * time.Second) // past the hold time
	if devs, err := h.devicesByAddr(t); err != nil || len(devs) != 10 || devs["18:00.0-1"].ID != held.ID {
		t.Fatalf("a cancelled hold changed the devices: %d %v", len(devs), err)
	}
	if n := strings.Count(h.daemon.Output(), "configuration reloaded"); n != 0 {
		t.Errorf("%d configurations taken", n)
	}

	// The device YAML emptied and left so: every GPU goes to
	// cuda_mps_replicas, after the hold.
	saved := time.Now()
	saveAtomic(t, h.devices, "")
	eventually(t, "the held change", func() (bool, string) {
		st := h.status(t)
		return st.ConfigHeld != nil && strings.Contains(st.ConfigHeld.Reason, "fall back to cuda_mps_replicas (10 each)"), fmt.Sprint(st.ConfigHeld)
	})
	eventually(t, "8 GPUs x 10 devices", func() (bool, string) {
		devs, err := h.devicesByAddr(t)
		return err == nil && len(devs) == 80, fmt.Sprint(len(devs), err)
	})
	if d := time.Since(saved); d < 3*time.Second {
		t.Errorf("applied %s after the save, before the hold time", d)
	}
	if st := h.status(t); st.ConfigHeld != nil || st.ConfigGeneration != 2 {
		t.Errorf("after applying: held %+v, generation %d", st.ConfigHeld, st.ConfigGeneration)
	}
	if devs, _ := h.devicesByAddr(t); devs["18:00.0-1"].ID != held.ID || devs["18:00.0-1"].GuestID != "vm-1" {
		t.Errorf("the held device lost its id or guest: %+v", devs["18:00.0-1"])
	}
	h.daemon.logs(t, "applying a held-back configuration change")
}

// Finding 4: a GPU taken out of the configuration gets its compute mode
// back; taken back, it is set again.
func TestRetiredGPUComputeMode(t *testing.T) {
	t.Parallel()
	h := startHost(t, fmt.Sprintf(devicesYAML, 3), "")
	var db string
	for _, g := range h.status(t).GPUs {
		if g.PCI.String() == "0000:db:00.0" {
			db = g.UUID
			if g.ComputeMode != "Exclusive_Process" {
				t.Fatalf("GPU db in %s", g.ComputeMode)
			}
		}
	}
	without := strings.Replace(fmt.Sprintf(devicesYAML, 3), "- path: /dev/nvidia7\n  type: NVIDIA_MPS\n  virtual_number: 1\n", "", 1)
	saveAtomic(t, h.devices, without)
	eventually(t, "GPU db back in Default", func() (bool, string) {
		sets := computeModeSets(h.daemon.Output())
		return len(sets) > 0 && sets[len(sets)-1] == db+"=Default", fmt.Sprint(sets)
	})
	saveAtomic(t, h.devices, fmt.Sprintf(devicesYAML, 3))
	eventually(t, "GPU db in Exclusive_Process again", func() (bool, string) {
		for _, g := range h.status(t).GPUs {
			if g.UUID == db {
				return g.ComputeMode == "Exclusive_Process", g.ComputeMode
			}
		}
		return false, "not planned"
	})
	sets := computeModeSets(h.daemon.Output())
	if sets[len(sets)-1] != db+"=Exclusive_Process" {
		t.Errorf("compute mode sets %v", sets)
	}
}

// Finding 6, second half: a live reload that changes a key only a restart
// applies says so in the log and /status.
func TestRestartOnlyChangeIsReported(t *testing.T) {
	t.Parallel()
	h := startHost(t, fmt.Sprintf(devicesYAML, 3), "")
	setKey(t, h.hostConf, "mps_control_timeout", "20s")
	eventually(t, "restart_pending", func() (bool, string) {
		st := h.status(t)
		return strings.Join(st.RestartPending, ",") == "mps_control_timeout", fmt.Sprint(st.RestartPending)
	})
	if !strings.Contains(h.daemon.Output(), `take effect at the next restart; until then the running values stay" component=agent keys=mps_control_timeout`) {
		t.Error("not logged")
	}
	if _, m := get("http://" + h.daemonAddr + "/metrics"); !strings.Contains(m, `mps_daemon_config_restart_pending{Hostname="e2e-host"} 1`) {
		t.Error("mps_daemon_config_restart_pending is not 1")
	}
}
