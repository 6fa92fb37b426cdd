package k8s

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"k8s.io/client-go/rest"
)

// The GPU host's proof of claims (tests/gpu/claims.sh) has no API server:
// it writes the driver's checkpoint with tests/gpu/clients/claims_checkpoint.py
// and starts the daemon with it, as after a restart. Here, on the
// simulated host with an API server that is not there: the daemon comes
// up, makes each claim's CDI entry and identity file from the checkpoint,
// with the claim's size, and reconciles on (the publication waits in the
// background).
func TestClaimsFromACheckpointWithoutAnAPIServer(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		if os.Getenv("MPS_REQUIRE_PODMAN") == "1" {
			t.Fatal("python3 is needed (tests/gpu/clients/claims_checkpoint.py)")
		}
		t.Skip("python3 is needed (tests/gpu/clients/claims_checkpoint.py)")
	}
	h := newHost(t, writeKubeconfig(t, &rest.Config{Host: "https://127.0.0.1:9", BearerToken: "nobody"}))
	h.writeDevicesText(t, sizedYAML)
	out, err := exec.Command(daemonBin, "--config", h.hostConf, "--simulate", "8xH100", "check-config").CombinedOutput()
	if err != nil {
		t.Fatalf("check-config: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`0000:18:00\.0\s+(GPU-[0-9a-f-]+)\s`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("check-config names no GPU at 0000:18:00.0:\n%s", out)
	}
	gpu0 := string(m[1])
	if err := os.MkdirAll(h.pluginDir, 0o750); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", filepath.Join("..", "gpu", "clients", "claims_checkpoint.py"), filepath.Join(h.pluginDir, "checkpoint.json"),
		gpu0, nodeName, "4", "81920", "a:40960", "b:20480", "c:20480")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("claims_checkpoint.py: %v\n%s", err, out)
	}
	d := h.start(t)
	eventually(t, "the daemon reconciled and wrote the claims' entries", func() (bool, string) {
		if d.Exited() {
			t.Fatalf("mps-daemon exited:\n%s", d.Output())
		}
		return len(h.claimEntries(t)) == 6 && regexp.MustCompile(`msg=reconciled`).MatchString(d.Output()), fmt.Sprint(len(h.claimEntries(t)))
	})
	entries := h.claimEntries(t)
	for i, mib := range []int{40960, 20480, 20480} {
		name := fmt.Sprintf("%s::%d", gpu0, 1000+i)
		e, ok := entries[name]
		if !ok {
			t.Fatalf("no entry %s", name)
		}
		for _, env := range []string{fmt.Sprintf("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=%dM", mib), "YUNION_MPS_VIRTUAL_DEVICE=" + name} {
			if !slices.Contains(e.ContainerEdits.Env, env) {
				t.Errorf("entry %s lacks %s: %v", name, env, e.ContainerEdits.Env)
			}
		}
		for _, mnt := range e.ContainerEdits.Mounts {
			if mnt.ContainerPath == "/run/yunion-mps/devices/"+gpu0 {
				if b, err := os.ReadFile(mnt.HostPath); err != nil || string(b) != name+"\n" {
					t.Errorf("entry %s's identity file holds %q (%v)", name, b, err)
				}
			}
		}
	}
}
