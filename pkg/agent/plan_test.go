package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The plan refuses a pipe root too long for the MPS sockets of a GPU under
// it, naming the key in host.conf, as check-config and a reload show it.
func TestPlanRefusesAPipeRootTooLongForTheSockets(t *testing.T) {
	long := "/tmp/" + strings.Repeat("p", 70)
	h := newHarness(t, "", fourAndTwo)
	h.writeConfig(t, fourAndTwo)
	cfg := h.loadWith(t, "cuda_mps_pipe_directory: "+long+"\n")
	var out strings.Builder
	err := CheckConfig(context.Background(), &out, cfg, ModeCloudpods, h.backend, h.dir+"/nosys", h.dir+"/nodev")
	want := "cuda_mps_pipe_directory: too long for the MPS sockets under it: MPS pipe directory " + long + "/GPU-"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "host.conf") {
		t.Errorf("got %v\nwant it to contain %q and name host.conf", err, want)
	}
	if out.Len() != 0 {
		t.Errorf("a refused configuration printed a plan:\n%s", out.String())
	}
}

// check-config reads ssl_ca_certs as the daemon reads it at start for the
// region: a FIFO there is refused at once, naming host.conf, the key and
// the file type; a certificate is taken.
func TestCheckConfigReadsTheCACertsFile(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	h.writeConfig(t, fourAndTwo)
	fifo := filepath.Join(h.dir, "ca.crt")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := h.loadWith(t, "auth_url: http://127.0.0.1:1/v3\nadmin_user: a\nadmin_password: b\nmps_inventory_backend: region\nssl_ca_certs: "+fifo+"\n")
	var out strings.Builder
	err := CheckConfig(context.Background(), &out, cfg, ModeCloudpods, h.backend, h.dir+"/nosys", h.dir+"/nodev")
	if err == nil || !strings.Contains(err.Error(), "host.conf") || !strings.Contains(err.Error(), "ssl_ca_certs") || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("check-config with a FIFO at ssl_ca_certs: %v", err)
	}
	if err := os.Remove(fifo); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join("testdata", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fifo, ca, 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := CheckConfig(context.Background(), &out, cfg, ModeCloudpods, h.backend, h.dir+"/nosys", h.dir+"/nodev"); err != nil || !strings.Contains(out.String(), "host.conf: ") {
		t.Errorf("check-config with a readable ssl_ca_certs: %v\n%s", err, out.String())
	}
}

// loadWith sets keys in the harness' host.conf (replacing the lines of the
// same keys) and loads it.
func (h *harness) loadWith(t *testing.T, extra string) *Config {
	t.Helper()
	cfg, err := loadWithErr(t, h, extra)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
