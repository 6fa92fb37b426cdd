package e2e

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/agent"
	"yunion.io/x/mps-daemon/pkg/gpu/nvmlsim"
)

// startRefusal is an edit of host.conf or the device YAML that the daemon
// refuses at start.
type startRefusal struct {
	name string
	// check is the check of agent.Validate that refuses it, "files" for
	// those made when the files are read.
	check   string
	conf    map[string]string // host.conf keys set, in one save
	devices string            // the device YAML, when set
	want    string
}

var startRefusals = []startRefusal{
	// Issue 22: both used to be taken by a reload, arming a failing restart.
	{name: "token file missing", check: "inventory token", conf: map[string]string{"mps_inventory_token_file": "/nonexistent"},
		want: "reading mps_inventory_token_file: open /nonexistent: no such file or directory"},
	{name: "pipe root of 150 characters", check: "plan", conf: map[string]string{"cuda_mps_pipe_directory": "/tmp/" + strings.Repeat("p", 145)},
		want: "cuda_mps_pipe_directory: too long for the MPS sockets under it"},
	// Issue 22: check-config took it, then every reconcile failed.
	// Issue 34: path separators and a right-to-left override went to the
	// inventory as a host's name.
	{name: "host name with path separators and a right-to-left override", check: "files", conf: map[string]string{"mps_host_name": `"../../é\u202e/x"`},
		want: `mps_host_name: "../../é\u202e/x" is not a host name: it holds "/", which Cloudpods' region refuses in a name (/ \ ;)`},
	{name: "host name with a right-to-left override", check: "files", conf: map[string]string{"mps_host_name": `"gpu\u202e1"`},
		want: `mps_host_name: "gpu\u202e1" is not a host name: it holds U+202E, a control or format character (or no UTF-8)`},
	{name: "host name of 10,000 bytes", check: "files", conf: map[string]string{"mps_host_name": strings.Repeat("h", 10000)},
		want: "mps_host_name: 10000 bytes, longer than the 128 the inventory allows for a host's name"},
	{name: "entry names no GPU present", check: "plan", devices: "devices:\n- path: /dev/dri/renderD150\n  type: NVIDIA_MPS\n  virtual_number: 2\n",
		want: "devices.yml:2"},
	// Issue 33: one GPU named twice, by its node and by its UUID ($GPU0:
	// the simulated host's first GPU), is refused naming both entries.
	{name: "one GPU named twice", check: "plan", devices: "devices:\n- path: /dev/nvidia0\n  type: NVIDIA_MPS\n  virtual_number: 2\n- path: $GPU0\n  type: NVIDIA_MPS\n  virtual_number: 4\n",
		want: `devices.yml:5: devices[1].path: "$GPU0" and devices[0].path ("/dev/nvidia0", line 2) name the same GPU, 0000:18:00.0 ($GPU0): keep one entry per GPU`},
	{name: "CA file without a certificate", check: "ssl_ca_certs", conf: map[string]string{
		"mps_inventory_backend": "region", "auth_url": "http://127.0.0.1:1/v3", "admin_user": "a", "admin_password": "b", "ssl_ca_certs": "$DIR/not-a-ca.crt"},
		want: "not-a-ca.crt holds no PEM certificate"},
	{name: "listen address of another machine", check: "listen address", conf: map[string]string{"mps_listen_address": "192.0.2.1:9331"},
		want: "mps_listen_address: 192.0.2.1 is not an address of this machine"},
	{name: "sync interval 1ns", check: "files", conf: map[string]string{"mps_sync_interval": "1ns"},
		want: `mps_sync_interval: must be from 1s to 1h, got "1ns"`},
}

// Issue 22: every check the daemon makes at start is made by check-config
// and by a live reload too, with the same message. Each edit is refused by
// a daemon starting on it (exit 1), by check-config (exit 1) and by a
// running daemon that reloads it: the running configuration stays,
// /status' config_error and the log say why, the rejected reload is
// counted. A check added to agent.Validate without a case here fails.
func TestStartChecksAreCheckConfigAndReloadChecks(t *testing.T) {
	t.Parallel()
	covered := map[string]bool{}
	for _, c := range startRefusals {
		covered[c.check] = true
	}
	for _, name := range agent.Validations() {
		if !covered[name] {
			t.Fatalf("agent.Validate's check %q has no case in startRefusals", name)
		}
	}

	h := startHost(t, fmt.Sprintf(devicesYAML, 3), "")
	goodConf, err := os.ReadFile(h.hostConf)
	if err != nil {
		t.Fatal(err)
	}
	goodDevices, err := os.ReadFile(h.devices)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range startRefusals {
		t.Run(c.name, func(t *testing.T) {
			// Start and check-config, on a copy of the host's files.
			want := strings.ReplaceAll(c.want, "$GPU0", simGPU0(t))
			e := newEnv(t, h.url, freePort(t))
			applyRefusal(t, e, c)
			_, errOut, code := run(t, nil, "mps-daemon", "--config", e.hostConf, "--simulate", "8xH100")
			atStart := refusal(errOut, e.dir)
			if code != 1 || !strings.Contains(atStart, want) {
				t.Fatalf("start: exit %d, want 1 and %q:\n%s", code, want, errOut)
			}
			_, errOut, code = run(t, nil, "mps-daemon", "--config", e.hostConf, "--simulate", "8xH100", "check-config")
			if got := refusal(errOut, e.dir); code != 1 || got != atStart {
				t.Errorf("check-config: exit %d\n%s\nwant exit 1 and the start's\n%s", code, got, atStart)
			}

			// A reload of the running daemon.
			before := rejectedReloads(t, h)
			applyRefusal(t, h.env, c)
			eventually(t, "the reload refused", func() (bool, string) {
				st := h.status(t)
				return strings.Contains(st.ConfigError, want), st.ConfigError
			})
			st := h.status(t)
			if got := strings.ReplaceAll(st.ConfigError, h.dir, "$DIR"); got != atStart {
				t.Errorf("/status config_error\n%s\nwant the start's\n%s", got, atStart)
			}
			if st.ConfigGeneration != 1 || !st.Ready || len(st.RestartPending) != 0 {
				t.Errorf("the running configuration changed: generation %d, ready %v, restart pending %v", st.ConfigGeneration, st.Ready, st.RestartPending)
			}
			h.daemon.logs(t, "configuration rejected; the last good one stays in force")
			if after := rejectedReloads(t, h); after <= before {
				t.Errorf("rejected reloads %d -> %d", before, after)
			}
			saveAtomic(t, h.hostConf, string(goodConf))
			saveAtomic(t, h.devices, string(goodDevices))
			eventually(t, "the error cleared", func() (bool, string) {
				st := h.status(t)
				return st.ConfigError == "", st.ConfigError
			})
		})
	}
}

// applyRefusal makes c's edit in e's files, host.conf in one save.
func applyRefusal(t *testing.T, e *env, c startRefusal) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(e.dir, "not-a-ca.crt"), []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c.devices != "" {
		saveAtomic(t, e.devices, strings.ReplaceAll(c.devices, "$GPU0", simGPU0(t)))
	}
	if len(c.conf) == 0 {
		return
	}
	b, err := os.ReadFile(e.hostConf)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, k := range slices.Sorted(maps.Keys(c.conf)) { // one order: the lines are in the messages
		line := k + ": " + strings.ReplaceAll(c.conf[k], "$DIR", e.dir)
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(k) + `:.*$`)
		if re.MatchString(s) {
			s = re.ReplaceAllLiteralString(s, line)
		} else {
			s += line + "\n"
		}
	}
	saveAtomic(t, e.hostConf, s)
}

// simGPU0 is the UUID of the first GPU of the simulated host the tests'
// daemons run on (--simulate 8xH100).
func simGPU0(t *testing.T) string {
	t.Helper()
	backend, sim, err := nvmlsim.New("8xH100", t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	return sim.GPUs()[0].UUID.String()
}

// refusal is the error a mps-daemon run ended with (after "mps-daemon: "
// on stderr), its directory written $DIR.
func refusal(stderr, dir string) string {
	_, msg, _ := strings.Cut(stderr, "mps-daemon: ")
	return strings.ReplaceAll(strings.TrimSpace(msg), dir, "$DIR")
}

var rejectedSeries = regexp.MustCompile(`(?m)^mps_daemon_config_reloads_total\{[^}]*result="rejected"\} (\d+)$`)

func rejectedReloads(t *testing.T, h *hostEnv) int {
	t.Helper()
	_, m := get("http://" + h.daemonAddr + "/metrics")
	if s := rejectedSeries.FindStringSubmatch(m); s != nil {
		n, _ := strconv.Atoi(s[1])
		return n
	}
	return 0
}
