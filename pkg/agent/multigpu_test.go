package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
	"yunion.io/x/mps-daemon/pkg/units"
)

// cdiEntry is one device of the host's CDI spec as a runtime applies it.
type cdiEntry struct {
	Env   map[string]string
	Nodes map[string]string // container path -> host path
}

// environ is the entry's environment as a process started with it has it.
func (e cdiEntry) environ() []string {
	var out []string
	for k, v := range e.Env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// cdiEntries is every device of the host's CDI spec, by name.
func (h *harness) cdiEntries(t *testing.T) map[string]cdiEntry {
	t.Helper()
	var spec struct {
		Devices []struct {
			Name           string `yaml:"name"`
			ContainerEdits struct {
				Env         []string `yaml:"env"`
				DeviceNodes []struct {
					Path     string `yaml:"path"`
					HostPath string `yaml:"hostPath"`
				} `yaml:"deviceNodes"`
			} `yaml:"containerEdits"`
		} `yaml:"devices"`
	}
	if err := yaml.Unmarshal([]byte(h.cdiSpec(t)), &spec); err != nil {
		t.Fatal(err)
	}
	out := map[string]cdiEntry{}
	for _, d := range spec.Devices {
		e := cdiEntry{Env: map[string]string{}, Nodes: map[string]string{}}
		for _, kv := range d.ContainerEdits.Env {
			k, v, _ := strings.Cut(kv, "=")
			e.Env[k] = v
		}
		for _, n := range d.ContainerEdits.DeviceNodes {
			e.Nodes[n.Path] = cmpOr(n.HostPath, n.Path)
		}
		out[d.Name] = e
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// scrambledDevices is a device YAML for every GPU of gpus, naming each a
// different way (its /dev/nvidiaN, UUID, PCI address, render node link)
// and splitting GPU i (in NVML's order) into i+1 devices, so that no two
// GPUs have the same cap.
func scrambledDevices(gpus []gpu.Info) string {
	var b strings.Builder
	b.WriteString("devices:\n")
	for i, g := range gpus {
		path := []string{
			fmt.Sprintf("/dev/nvidia%d", g.Minor),
			g.UUID.String(),
			strings.ToUpper(g.PCI.String()),
			"/dev/dri/by-path/pci-" + g.PCI.String() + "-render",
		}[i%4]
		fmt.Fprintf(&b, "- path: %s\n  type: NVIDIA_MPS\n  virtual_number: %d\n", path, g.Index+1)
	}
	return b.String()
}

// TestEveryDeviceLandsOnItsGPU: on a simulated 8-GPU host whose NVML
// indexes, device minors and PCI order all differ, every virtual device's
// CDI entry, by either of its names, in both pipe layouts, names its own
// GPU (CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES, the identity) and
// hands over that GPU's /dev/nvidiaN; a client started with the entry's
// environment alone connects to the simulated MPS on that GPU, held to
// that device's cap; and a client that names another GPU is refused, as
// the real MPS refuses it (the client contract, pkg/mps).
func TestEveryDeviceLandsOnItsGPU(t *testing.T) {
	for _, layout := range []string{"", "mps_pipe_layout: single\n"} {
		t.Run(cmpOr(strings.TrimSpace(layout), "per GPU"), func(t *testing.T) {
			h := newHarness(t, layout, "")
			sim, _ := h.onSimulatedHost(t, "8xH100:scrambled")
			gpus := sim.GPUs()
			h.cfg.Devices = mustDevices(t, h.dir, scrambledDevices(gpus))
			if err := h.agent.Reconcile(context.Background()); err != nil {
				t.Fatal(err)
			}
			entries := h.cdiEntries(t)
			ids := map[string]string{}
			for _, d := range h.devices() {
				_, i, _ := strings.Cut(d.Addr, "-")
				ids[d.DevicePath+"::"+i] = d.ID
			}
			if len(ids) != 36 || len(entries) != 72 {
				t.Fatalf("%d devices, %d CDI entries; want 1+2+...+8 = 36 devices, each under two names", len(ids), len(entries))
			}
			pid := 9000
			for _, g := range gpus {
				capMiB := g.MemoryTotal.MiB() / units.MiB(g.Index+1)
				node := fmt.Sprintf("/dev/nvidia%d", g.Minor)
				_, nodeErr := os.Stat(filepath.Join(sim.DevRoot(), fmt.Sprintf("nvidia%d", g.Minor)))
				for i := range g.Index + 1 {
					name := fmt.Sprintf("%s::%d", g.UUID, i)
					for _, entryName := range []string{name, ids[name]} {
						e, ok := entries[entryName]
						if !ok {
							t.Fatalf("no CDI entry %q (device %s)", entryName, name)
						}
						for k, want := range map[string]string{
							"CUDA_VISIBLE_DEVICES": g.UUID.String(), "NVIDIA_VISIBLE_DEVICES": g.UUID.String(),
							"YUNION_MPS_VIRTUAL_DEVICE": name, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": fmt.Sprintf("0=%dM", capMiB),
						} {
							if e.Env[k] != want {
								t.Errorf("entry %s: %s=%q, want %q", entryName, k, e.Env[k], want)
							}
						}
						// The node of its GPU, and of no other GPU; the
						// stand-in nodes are character devices only when
						// the test runs as root.
						var gpuNodes []string
						for p := range e.Nodes {
							if strings.TrimLeft(strings.TrimPrefix(p, "/dev/nvidia"), "0123456789") == "" {
								gpuNodes = append(gpuNodes, p)
							}
						}
						wantNodes := []string{node}
						if !isCharDevice(filepath.Join(sim.DevRoot(), node[len("/dev/"):])) {
							wantNodes = nil
						}
						if nodeErr != nil || !slices.Equal(gpuNodes, wantNodes) || (wantNodes != nil && e.Nodes[node] != filepath.Join(sim.DevRoot(), node[len("/dev/"):])) {
							t.Errorf("entry %s: GPU nodes %v (%v), want %v from the host's %s", entryName, e.Nodes, nodeErr, wantNodes, sim.DevRoot())
						}
						pid++
						v, err := h.runner.Connect(pid, e.environ())
						if err != nil || !slices.Equal(v.Devices, []string{g.UUID.String()}) || v.MemoryLimits[0] != capMiB {
							t.Errorf("a client with entry %s's environment: %+v, %v; want GPU %s alone under %d MiB", entryName, v, err, g.UUID, capMiB)
						}
					}
				}
				// A client of one of its devices that names another GPU.
				other := gpus[(g.Index+1)%len(gpus)].UUID.String()
				env := entries[g.UUID.String()+"::0"].Env
				env["CUDA_VISIBLE_DEVICES"] = other
				pid++
				v, err := h.runner.Connect(pid, cdiEntry{Env: env}.environ())
				if layout == "" && !errors.Is(err, mpssim.ErrNoDevice) {
					t.Errorf("a client of %s naming GPU %s: %+v, %v; want it refused, as its GPU's daemon serves that GPU alone", g.UUID, other, v, err)
				}
			}
			if layout != "" {
				// Cloudpods' pods reach the single daemon with its pipe
				// directory alone: each GPU they see is held to its own cap.
				pid++
				v, err := h.runner.Connect(pid, []string{"CUDA_MPS_PIPE_DIRECTORY=" + entries[gpus[0].UUID.String()+"::0"].Env["CUDA_MPS_PIPE_DIRECTORY"]})
				if err != nil || len(v.Devices) != len(gpus) {
					t.Fatalf("a client without CUDA_VISIBLE_DEVICES: %+v, %v; want every GPU", v, err)
				}
				for k, u := range v.Devices {
					g := gpus[slices.IndexFunc(gpus, func(g gpu.Info) bool { return g.UUID.String() == u })]
					if want := g.MemoryTotal.MiB() / units.MiB(g.Index+1); v.MemoryLimits[k] != want {
						t.Errorf("its ordinal %d, GPU %s: %d MiB, want the GPU's cap %d", k, u, v.MemoryLimits[k], want)
					}
				}
			}
		})
	}
}

func isCharDevice(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode()&fs.ModeCharDevice != 0
}
