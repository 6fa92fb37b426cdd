package agent

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// check-config refuses what would stop the daemon at start or in its first
// reconcile, and the daemon's own reload refuses it the same way.
func TestCheckConfigChecksWhatTheDaemonNeeds(t *testing.T) {
	long := "/tmp/" + strings.Repeat("p", 70)
	for _, tc := range []struct {
		name, hostConf, want string
	}{
		{"token file missing", "mps_inventory_token_file: /nonexistent/mps.token\n",
			"reading mps_inventory_token_file: open /nonexistent/mps.token: no such file or directory"},
		{"pipe root too long for the per-GPU sockets", "cuda_mps_pipe_directory: " + long + "\n",
			"cuda_mps_pipe_directory: too long for the MPS sockets under it: MPS pipe directory " + long + "/GPU-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "", fourAndTwo)
			h.writeConfig(t, fourAndTwo)
			cfg := h.loadWith(t, tc.hostConf)
			err := CheckConfig(context.Background(), cfg, h.backend, h.dir+"/nosys", h.dir+"/nodev", io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "host.conf") {
				t.Errorf("got %v\nwant it to contain %q and name host.conf", err, tc.want)
			}
		})
	}
}

// loadWith sets keys in the harness' host.conf (replacing the lines of the
// same keys) and loads it.
func (h *harness) loadWith(t *testing.T, extra string) *Config {
	t.Helper()
	path := h.hostConfPath()
	b, err := os.ReadFile(path)
	raw := string(b)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.Split(strings.TrimSpace(raw), "\n") {
		key, _, _ := strings.Cut(line, ":")
		if !strings.Contains(extra, key+":") {
			kept = append(kept, line)
		}
	}
	writeAtomic(t, path, strings.Join(kept, "\n")+"\n"+extra)
	cfg, err := LoadConfig(filepath.Clean(path))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
