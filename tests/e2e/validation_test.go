package e2e

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/badconfig"
	"yunion.io/x/mps-daemon/pkg/agent"
	"yunion.io/x/mps-daemon/pkg/gpu/nvmlsim"
)

// Issue 22: every check the daemon makes at start is made by check-config
// and by a live reload too, with the same message. Each edit is refused by
// a daemon starting on it (exit 1), by check-config (exit 1) and by a
// running daemon that reloads it: the running configuration stays,
// /status' config_error and the log say why, the rejected reload is
// counted. A check added to agent.Validate without a case here fails.
func TestStartChecksAreCheckConfigAndReloadChecks(t *testing.T) {
	t.Parallel()
	covered := map[string]bool{}
	for _, c := range badconfig.Cases {
		covered[c.Check] = true
	}
	for _, name := range agent.Validations() {
		if !covered[name] {
			t.Fatalf("agent.Validate's check %q has no case in badconfig.Cases", name)
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
	for _, c := range badconfig.Cases {
		t.Run(c.Name, func(t *testing.T) {
			// Start and check-config, on a copy of the host's files.
			want := c.Expect(simGPU0(t))
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
func applyRefusal(t *testing.T, e *env, c badconfig.Case) {
	t.Helper()
	if err := badconfig.Apply(e.dir, e.hostConf, e.devices, simGPU0(t), c); err != nil {
		t.Fatal(err)
	}
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
func refusal(stderr, dir string) string { return badconfig.Message(stderr, dir) }

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
