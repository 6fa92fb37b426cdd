package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The plan refuses a pipe root too long for the MPS sockets of a GPU under
// it, naming the key in host.conf, as check-config and a reload show it.
func TestPlanRefusesAPipeRootTooLongForTheSockets(t *testing.T) {
	long := "/tmp/" + strings.Repeat("p", 70)
	h := newHarness(t, "", fourAndTwo)
	h.writeConfig(t, fourAndTwo)
	cfg := h.loadWith(t, "cuda_mps_pipe_directory: "+long+"\n")
	_, err := Plan(context.Background(), cfg, h.backend, h.dir+"/nosys", h.dir+"/nodev")
	want := "cuda_mps_pipe_directory: too long for the MPS sockets under it: MPS pipe directory " + long + "/GPU-"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "host.conf") {
		t.Errorf("got %v\nwant it to contain %q and name host.conf", err, want)
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
