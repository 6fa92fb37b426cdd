package agent

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"yunion.io/x/mps-daemon/pkg/accounting"
	"yunion.io/x/mps-daemon/pkg/entries"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/identity"
	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/statusview"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// cdiDevice is what these tests read of a spec entry.
type cdiDevice struct {
	Name           string `yaml:"name"`
	ContainerEdits struct {
		Mounts []struct {
			HostPath      string   `yaml:"hostPath"`
			ContainerPath string   `yaml:"containerPath"`
			Options       []string `yaml:"options"`
		} `yaml:"mounts"`
	} `yaml:"containerEdits"`
}

// TestSpecMountsEachDevicesIdentityFile: every entry of the spec, under
// both names, mounts read-only a file of the state directory that exists
// and names the device, where the accounting looks for it.
func TestSpecMountsEachDevicesIdentityFile(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	if err := h.agent.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Version string      `yaml:"cdiVersion"`
		Devices []cdiDevice `yaml:"devices"`
	}
	if err := yaml.Unmarshal([]byte(h.cdiSpec(t)), &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Version != "0.5.0" {
		t.Errorf("cdiVersion %s, want 0.5.0 (Debian 12's Podman takes nothing newer)", spec.Version)
	}
	idDir := filepath.Join(h.dir, "state", "identity")
	if fi, err := os.Stat(idDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("identity directory %s: %v %v, want mode 0700", idDir, fi.Mode(), err)
	}
	names := map[string]bool{}
	for _, d := range spec.Devices {
		found := false
		for _, m := range d.ContainerEdits.Mounts {
			if !strings.HasPrefix(m.ContainerPath, identity.ContainerDir+"/") {
				continue
			}
			found = true
			if filepath.Dir(m.HostPath) != idDir || !strings.Contains(strings.Join(m.Options, ","), "ro") {
				t.Errorf("%s: identity mount %+v, want a read-only file of %s", d.Name, m, idDir)
			}
			b, err := os.ReadFile(m.HostPath)
			if err != nil {
				t.Errorf("%s: the spec mounts %s, which cannot be read: %v", d.Name, m.HostPath, err)
				continue
			}
			name := strings.TrimSpace(string(b))
			uuid, _, err := vdev.ParseName(name)
			if err != nil || m.ContainerPath != identity.ContainerPath(uuid) {
				t.Errorf("%s: file names %q, mounted at %s", d.Name, name, m.ContainerPath)
			}
			if strings.HasPrefix(d.Name, "GPU-") && name != d.Name {
				t.Errorf("entry %s mounts the identity of %s", d.Name, name)
			}
			names[name] = true
		}
		if !found {
			t.Errorf("%s: no identity file mounted", d.Name)
		}
	}
	if len(names) != 6 {
		t.Errorf("%d devices have identity files, want 4+2", len(names))
	}
}

// TestSpecNotWrittenWhenAnIdentityFileCannotBe: something that is not the
// daemon's file in the identity file's place keeps the spec from being
// written (a runtime would mount it), and the status says why.
func TestSpecNotWrittenWhenAnIdentityFileCannotBe(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	store := entries.IdentityStore(h.cfg.Host.StateDirectory)
	if err := store.Ensure(nil); err != nil {
		t.Fatal(err)
	}
	p, err := store.Path(vdev.NameOf(twoGPUs()[1].UUID, 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/shadow", p); err != nil {
		t.Fatal(err)
	}
	_ = h.agent.Reconcile(context.Background())
	st := h.agent.Status()
	if st.CDI == nil || !strings.Contains(st.CDI.Error, "not ours to replace") {
		t.Errorf("CDI status %+v, want the identity file's error", st.CDI)
	}
	if _, err := os.Stat(filepath.Join(h.dir, "cdi", "yunion.io-mps-gpu.yaml")); !os.IsNotExist(err) {
		t.Errorf("a spec was written (%v) although one device's identity file could not be made", err)
	}
}

// container is a fake container for the agent's fake /proc: its own root
// directory, mount namespace and cgroup.
type container struct {
	root, ns, cgroup string
}

// newContainer is a container given device (its identity file linked into
// its root, which a bind mount does on a real host); "" gives none.
func (h *harness) newContainer(t *testing.T, id, device string) container {
	t.Helper()
	c := container{root: filepath.Join(h.dir, "containers", id), ns: "mnt:[40265330" + id + "]", cgroup: "0::/machine.slice/libpod-" + id + ".scope\n"}
	if err := os.MkdirAll(c.root, 0o755); err != nil {
		t.Fatal(err)
	}
	if device == "" {
		return c
	}
	src, err := entries.IdentityStore(h.cfg.Host.StateDirectory).Path(vdev.Name(device))
	if err != nil {
		t.Fatal(err)
	}
	uuid, _, _ := vdev.ParseName(device)
	dst := filepath.Join(c.root, identity.ContainerPath(uuid))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(src, dst); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestContainerLiarIsBilledAndTerminatedByItsIdentity: the H100 escape of
// issue 14, on the agent. Container 11 holds GPU0::0, container 22 holds
// GPU0::1. A second process of container 11 names GPU0::1 in its
// environment. Believing the environment would put 40 GiB on GPU0::1 and
// pick its newest client, container 22's own process. Billed by identity,
// GPU0::0 is over its cap, the liar is terminated, container 22's process
// is untouched; status, metrics and `mps-daemon status` show the same
// figures the enforcement used, and the lie.
func TestContainerLiarIsBilledAndTerminatedByItsIdentity(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	killer := &signals{}
	h.withFakeProc(t, killer)
	var logs bytes.Buffer
	h.agent.log = slog.New(slog.NewTextHandler(&logs, nil))
	h.agent.acct = h.agent.newAccounting(accounting.New(accounting.Options{ProcRoot: h.cfg.Host.ProcRoot, Identities: entries.IdentityStore(h.cfg.Host.StateDirectory).Table, Killer: killer,
		Log: slog.New(slog.NewTextHandler(&logs, nil))}))
	ctx := context.Background()
	if err := h.agent.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	g0 := twoGPUs()[0].UUID
	d0, d1 := vdev.NameOf(g0, 0).String(), vdev.NameOf(g0, 1).String()
	c11, c22 := h.newContainer(t, "11", d0), h.newContainer(t, "22", d1)
	const gib = 1 << 30
	h.writeProc(t, 101, 1, 1000, d0, c11)
	h.writeProc(t, 102, 101, 2000, d1, c11) // the liar
	h.writeProc(t, 201, 1, 3000, d1, c22)   // newest of all
	for _, pid := range []int{101, 102, 201} {
		if _, err := h.runner.AddClient(h.pipeDir(0), pid); err != nil {
			t.Fatal(err)
		}
	}
	h.backend.mu.Lock()
	h.backend.procs = map[gpu.UUID][]gpu.Process{g0: {{PID: 101, UsedMemoryBytes: 20 * gib}, {PID: 102, UsedMemoryBytes: 20 * gib}, {PID: 201, UsedMemoryBytes: 20 * gib}}}
	h.backend.mu.Unlock()

	h.agent.account(ctx)

	clients, err := mps.NewController(h.runner, mps.Env{PipeDir: h.pipeDir(0)}, 5*time.Second, nil).ClientServers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for pid, want := range map[int]bool{101: true, 102: false, 201: true} {
		if _, there := clients[pid]; there != want {
			t.Errorf("client %d connected=%v after enforcement, want %v", pid, there, want)
		}
	}
	st := h.agent.Status()
	if d := deviceOf(st, d0); d == nil || d.UsedBytes != 40*gib || d.Clients != 2 || !d.OverCap || d.LastStep != accounting.StepTerminateClient {
		t.Errorf("%s status: %+v; want 40 GiB of 2 clients, over cap, terminate_client", d0, d)
	}
	if d := deviceOf(st, d1); d == nil || d.UsedBytes != 20*gib || d.Clients != 1 || d.OverCap {
		t.Errorf("%s status: %+v; want its own 20 GiB only", d1, d)
	}
	// The figure enforcement acted on is the one the status shows.
	if !strings.Contains(logs.String(), "device_used_mib=40960") {
		t.Errorf("enforcement's log line should say 40960 MiB:\n%s", logs.String())
	}
	a := st.Accounting
	if a == nil || len(a.Mismatches) != 1 || a.Mismatches[0].PID != 102 || a.Mismatches[0].Device != d0 || a.Mismatches[0].Environment != d1 {
		t.Fatalf("accounting status %+v, want PID 102 billed to %s although its environment says %s", a, d0, d1)
	}
	if a.Clients[accounting.SourceIdentity] != 3 || a.Clients["unknown"] != 0 {
		t.Errorf("clients by source %v, want 3 by identity", a.Clients)
	}
	if !strings.Contains(logs.String(), "billed by its identity") || !strings.Contains(logs.String(), "pid=102") {
		t.Errorf("no log line for the liar:\n%s", logs.String())
	}
	var view bytes.Buffer
	if err := statusview.Write(&view, st, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(view.String(), "1 MPS client disagreeing") || !strings.Contains(view.String(), "102  "+d0+"  "+d1) {
		t.Errorf("mps-daemon status does not show the liar:\n%s", view.String())
	}
	srv := httptest.NewServer(h.agent.Handler())
	defer srv.Close()
	body := scrapeAgent(t, srv.URL)
	for _, want := range []string{"mps_daemon_accounting_mismatched_clients{Hostname=\"node-1\"} 1", `source="identity"} 3`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	for _, s := range killer.sent {
		if strings.HasPrefix(s, "201:") {
			t.Errorf("container 22's process was signalled: %v", killer.sent)
		}
	}
}

// TestAStartMakesEveryPlannedIdentityFile: a start makes the identity file
// of every planned device while MPS is prepared, also of a GPU whose MPS
// then fails (its devices need them once it heals; files are never
// removed); the spec names only the healthy GPU's devices.
func TestAStartMakesEveryPlannedIdentityFile(t *testing.T) {
	h := newHarness(t, "", fourAndTwo)
	h.agent.opts.Runner = failingRunner{Runner: h.runner, badPipe: h.pipeDir(1)}
	if err := h.agent.Reconcile(context.Background()); err == nil {
		t.Fatal("want GPU 1's MPS failure")
	}
	store := entries.IdentityStore(h.cfg.Host.StateDirectory)
	spec, err := os.ReadFile(filepath.Join(h.dir, "cdi", "yunion.io-mps-gpu.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for g, n := range []int{4, 2} {
		for i := range n {
			name := vdev.NameOf(twoGPUs()[g].UUID, i)
			p, err := store.Path(name)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(p); err != nil {
				t.Errorf("identity file of %s: %v", name, err)
			}
			if named := strings.Contains(string(spec), "name: "+name.String()); named != (g == 0) {
				t.Errorf("spec names %s: %v, want %v", name, named, g == 0)
			}
		}
	}
	if !h.agent.entries.identitiesMade {
		t.Error("the files were made ahead, but the agent does not know it")
	}
}
