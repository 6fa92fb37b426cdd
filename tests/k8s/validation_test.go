package k8s

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"yunion.io/x/mps-daemon/internal/testsupport/badconfig"
)

// Issue 40: the Kubernetes mode started (and never became ready) on
// configurations the Cloudpods mode and check-config refuse. Every
// configuration tests/e2e's validation test refuses is run through both
// modes of the Kubernetes build, as a node starts before it reaches its
// API server (the kubeconfig names one that is not there): the Cloudpods
// mode's start and `check-config --mode cloudpods` refuse it; the
// Kubernetes mode's start (exit 1) and its check-config (the build's
// default mode) refuse it with the same message, and a running daemon of
// that mode refuses it on a reload, keeping its configuration. What only
// the Cloudpods mode reads (the inventory's token file, the region's CA
// file) the Kubernetes mode takes, at start, in check-config and on a
// reload.
func TestBothModesRefuseWhatCheckConfigRefuses(t *testing.T) {
	kc := writeKubeconfig(t, &rest.Config{Host: "https://127.0.0.1:9", BearerToken: "nobody"})
	running := newHost(t, kc)
	running.writeDevices(t, 2, 2)
	gpu0 := running.gpu0(t)
	good := running.files(t)
	d := running.start(t)
	addr := d.listenAddress(t)
	eventually(t, "the Kubernetes mode ready with its API server away", func() (bool, string) {
		st, err := statusOf(addr)
		return err == nil && st.Ready, d.Output()
	})

	for _, c := range badconfig.Cases {
		t.Run(c.Name, func(t *testing.T) {
			want := c.Expect(gpu0)
			h := newHost(t, kc)
			h.writeDevices(t, 2, 2)
			if err := badconfig.Apply(h.dir, h.hostConf, h.devices, gpu0, c); err != nil {
				t.Fatal(err)
			}
			sim := []string{"--config", h.hostConf, "--simulate", "8xH100"}
			code, msg := h.run(t, sim...)
			if code != 1 || !strings.Contains(msg, want) {
				t.Fatalf("the Cloudpods mode's start: exit %d %q, want 1 and %q", code, msg, want)
			}
			if code, got := h.run(t, append(sim, "check-config", "--mode", "cloudpods")...); code != 1 || got != msg {
				t.Errorf("check-config --mode cloudpods: exit %d %q, want 1 and the start's %q", code, got, msg)
			}
			checkCode, checkMsg := h.run(t, append(sim, "check-config")...)
			if c.CloudpodsOnly() {
				if checkCode != 0 {
					t.Errorf("check-config of the Kubernetes mode refuses what the mode never reads: exit %d %q", checkCode, checkMsg)
				}
				k := h.start(t)
				eventually(t, "the Kubernetes mode started on it", func() (bool, string) {
					return strings.Contains(k.Output(), "msg=reconciled"), k.Output()
				})
			} else {
				if code, got := h.run(t, append(sim, h.kubernetesArgs()...)...); code != 1 || got != msg {
					t.Errorf("the Kubernetes mode's start: exit %d %q, want 1 and the Cloudpods mode's %q", code, got, msg)
				}
				if checkCode != 1 || checkMsg != msg {
					t.Errorf("check-config of the Kubernetes mode: exit %d %q, want 1 and %q", checkCode, checkMsg, msg)
				}
			}

			// A reload of the running Kubernetes mode.
			before, err := statusOf(addr)
			if err != nil {
				t.Fatal(err)
			}
			if err := badconfig.Apply(running.dir, running.hostConf, running.devices, gpu0, c); err != nil {
				t.Fatal(err)
			}
			if c.CloudpodsOnly() {
				eventually(t, "the reload taken", func() (bool, string) {
					st, err := statusOf(addr)
					return err == nil && st.ConfigGeneration > before.ConfigGeneration && st.ConfigError == "", st.ConfigError
				})
			} else {
				eventually(t, "the reload refused", func() (bool, string) {
					st, err := statusOf(addr)
					return err == nil && st.ConfigError != "", st.ConfigError
				})
				st, _ := statusOf(addr)
				if got := strings.ReplaceAll(st.ConfigError, running.dir, "$DIR"); got != strings.ReplaceAll(msg, h.dir, "$DIR") {
					t.Errorf("/status config_error\n%s\nwant the start's\n%s", got, msg)
				}
				if st.ConfigGeneration != before.ConfigGeneration || !st.Ready {
					t.Errorf("the running configuration changed: generation %d -> %d, ready %v", before.ConfigGeneration, st.ConfigGeneration, st.Ready)
				}
			}
			good.restore(t)
			eventually(t, "the good files in force again", func() (bool, string) {
				st, err := statusOf(addr)
				return err == nil && st.ConfigError == "" && len(st.RestartPending) == 0 && st.Ready, st.ConfigError
			})
		})
	}
}

// gpu0 is the UUID of the simulated host's first GPU, at 0000:18:00.0, as
// check-config prints it.
func (h *host) gpu0(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(daemonBin, "--config", h.hostConf, "--simulate", "8xH100", "check-config").Output()
	if err != nil {
		t.Fatalf("check-config: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`0000:18:00\.0\s+(GPU-[0-9a-f-]+)\s`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("check-config names no GPU at 0000:18:00.0:\n%s", out)
	}
	return string(m[1])
}

// kubernetesArgs are the Kubernetes mode's command and flags for h.
func (h *host) kubernetesArgs() []string {
	return []string{"kubernetes", "--node-name", nodeName, "--kubeconfig", h.kubeconfig, "--plugin-dir", h.pluginDir, "--registrar-dir", h.registrarDir}
}

// run runs mps-daemon to its end and answers its exit code and the error
// it ended with, h's directory written $DIR.
func (h *host) run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(daemonBin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		t.Fatalf("mps-daemon %v still runs after two minutes:\n%s", args, stderr.String())
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), badconfig.Message(stderr.String(), h.dir)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, badconfig.Message(stderr.String(), h.dir)
}

// goodFiles are a host's files as they were, to put back.
type goodFiles struct {
	hostConf, devices         string
	hostConfPath, devicesPath string
}

func (h *host) files(t *testing.T) goodFiles {
	t.Helper()
	return goodFiles{hostConf: readFile(t, h.hostConf), devices: readFile(t, h.devices), hostConfPath: h.hostConf, devicesPath: h.devices}
}

func (g goodFiles) restore(t *testing.T) {
	t.Helper()
	if err := badconfig.SaveAtomic(g.hostConfPath, g.hostConf); err != nil {
		t.Fatal(err)
	}
	if err := badconfig.SaveAtomic(g.devicesPath, g.devices); err != nil {
		t.Fatal(err)
	}
}

var listening = regexp.MustCompile(`msg="serving health and metrics".* address=(\S+)`)

// listenAddress is where the daemon serves /status, once it says.
func (d *daemon) listenAddress(t *testing.T) string {
	t.Helper()
	var addr string
	eventually(t, "the daemon serving /status", func() (bool, string) {
		if m := listening.FindStringSubmatch(d.Output()); m != nil {
			addr = m[1]
		}
		return addr != "", d.Output()
	})
	return addr
}

// daemonStatus is what these tests read of the daemon's /status (its
// JSON names are pkg/status', which this module does not import: its
// leaves would need their modules here).
type daemonStatus struct {
	Ready            bool     `json:"ready"`
	LastError        string   `json:"last_error"`
	ConfigGeneration int      `json:"config_generation"`
	ConfigError      string   `json:"config_error"`
	RestartPending   []string `json:"restart_pending"`
	Claims           []struct {
		Claim            string `json:"claim"`
		UID              string `json:"uid"`
		Name             string `json:"name"`
		GPU              string `json:"gpu"`
		CapBytes         int64  `json:"cap_bytes"`
		ThreadPercentage int    `json:"thread_percentage"`
	} `json:"claims"`
}

// runStatus is `mps-daemon status` of the daemon at addr.
func runStatus(addr string) (string, error) {
	out, err := exec.Command(daemonBin, "status", "--address", addr).CombinedOutput()
	return string(out), err
}

// statusOf is the daemon's /status at addr.
func statusOf(addr string) (daemonStatus, error) {
	var st daemonStatus
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
