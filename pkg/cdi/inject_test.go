package cdi

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
)

// container is an OCI spec as a runtime makes it before CDI: an image
// variable, a cap and a priority the user tried to raise with -e, a GPU
// ordinal the image names (on a host of several GPUs, another GPU's), and
// the runtime's own /dev/shm.
func container() *oci.Spec {
	return &oci.Spec{
		Process: &oci.Process{Env: []string{
			"PATH=/usr/bin",
			"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=999999M",
			"CUDA_MPS_CLIENT_PRIORITY=0",
			"CUDA_VISIBLE_DEVICES=1",
		}},
		Mounts: []oci.Mount{{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid"}}},
		Linux:  &oci.Linux{},
	}
}

func writeAndLoad(t *testing.T, o Options, devs []Device) {
	t.Helper()
	if _, _, err := Sync(o, devs); err != nil {
		t.Fatal(err)
	}
}

// TestInjectEveryEdit loads the written spec as a runtime does and injects
// each virtual device, by both its names, into a container: the container
// must get exactly the variables, mounts and (here: no) device nodes of
// docs/containers.md.
func TestInjectEveryEdit(t *testing.T) {
	o := testOptions(t)
	devs := hostDevices()
	writeAndLoad(t, o, devs)
	c := loadCache(t, o.Dir)

	var want []string
	for _, d := range devs {
		for _, n := range deviceNames(d) {
			want = append(want, QualifiedName(DefaultKind, n))
		}
	}
	slices.Sort(want)
	if got := c.ListDevices(); !slices.Equal(got, want) {
		t.Fatalf("devices in the cache:\n got %q\nwant %q", got, want)
	}

	for _, d := range devs {
		for _, name := range deviceNames(d) {
			t.Run(name, func(t *testing.T) {
				s := container()
				if unresolved, err := c.InjectDevices(s, QualifiedName(DefaultKind, name)); err != nil {
					t.Fatalf("inject: %v (unresolved %q)", err, unresolved)
				}
				wantEnv := []string{
					"PATH=/usr/bin",
					// The user's -e is replaced, in place, by the device's cap.
					fmt.Sprintf("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=%dM", d.MemoryLimit),
					// So is the priority: a batch device's 1 wins.
					fmt.Sprintf("CUDA_MPS_CLIENT_PRIORITY=%d", d.ClientPriority),
					// And the image's GPU, by the device's GPU: the one the
					// client must land on.
					"CUDA_VISIBLE_DEVICES=" + d.GPU.UUID.String(),
					"NVIDIA_VISIBLE_DEVICES=" + d.GPU.UUID.String(),
					"CUDA_MPS_PIPE_DIRECTORY=" + d.PipeDir,
					fmt.Sprintf("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d", d.ThreadPercentage),
					fmt.Sprintf("YUNION_MPS_VIRTUAL_DEVICE=%s::%d", d.GPU.UUID, d.Index),
				}
				if !slices.Equal(s.Process.Env, wantEnv) {
					t.Errorf("env:\n got %q\nwant %q", s.Process.Env, wantEnv)
				}
				wantMounts := []oci.Mount{
					// The library sorts mounts by depth: /dev/shm first.
					{Destination: "/dev/shm", Source: "/dev/shm", Type: "bind", Options: []string{"rw", "nosuid", "nodev", "noexec", "bind"}},
					{Destination: d.PipeDir, Source: d.PipeDir, Type: "bind", Options: []string{"ro", "nosuid", "nodev", "noexec", "bind"}},
					// The file naming the device, where the accounting looks.
					{Destination: "/run/yunion-mps/devices/" + d.GPU.UUID.String(), Source: d.IdentityFile, Type: "bind", Options: []string{"ro", "nosuid", "nodev", "noexec", "bind"}},
					// Root in the container must not reach the privileged socket.
					{Destination: d.PipeDir + "/control_privileged", Source: "/dev/null", Type: "bind", Options: []string{"ro", "nosuid", "nodev", "noexec", "bind"}},
				}
				if fmt.Sprint(s.Mounts) != fmt.Sprint(wantMounts) {
					t.Errorf("mounts:\n got %+v\nwant %+v", s.Mounts, wantMounts)
				}
				if len(s.Linux.Devices) != 0 || s.Linux.Resources != nil {
					t.Errorf("plain files under the dev root became device nodes: %+v %+v", s.Linux.Devices, s.Linux.Resources)
				}
			})
		}
	}
}

// TestInjectNoShm: with ShmPath "none" the runtime's own /dev/shm stays.
func TestInjectNoShm(t *testing.T) {
	o := testOptions(t)
	o.ShmPath = NoShm
	d := hostDevices()[0]
	writeAndLoad(t, o, []Device{d})
	s := container()
	if _, err := loadCache(t, o.Dir).InjectDevices(s, QualifiedName(DefaultKind, d.Name().String())); err != nil {
		t.Fatal(err)
	}
	want := []oci.Mount{
		{Destination: "/dev/shm", Source: "shm", Type: "tmpfs", Options: []string{"nosuid"}},
		{Destination: d.PipeDir, Source: d.PipeDir, Type: "bind", Options: []string{"ro", "nosuid", "nodev", "noexec", "bind"}},
		{Destination: "/run/yunion-mps/devices/" + d.GPU.UUID.String(), Source: d.IdentityFile, Type: "bind", Options: []string{"ro", "nosuid", "nodev", "noexec", "bind"}},
		{Destination: d.PipeDir + "/control_privileged", Source: "/dev/null", Type: "bind", Options: []string{"ro", "nosuid", "nodev", "noexec", "bind"}},
	}
	if fmt.Sprint(s.Mounts) != fmt.Sprint(want) {
		t.Errorf("mounts:\n got %+v\nwant %+v", s.Mounts, want)
	}
}

// TestInjectDeviceNodes uses real character devices: the nodes that exist
// are injected with their numbers and a cgroup rule allowing read and write
// (no mknod); a node that is a plain file, or absent, is not.
func TestInjectDeviceNodes(t *testing.T) {
	type node struct {
		path         string
		major, minor int64
	}
	ctl, uvm, tools := node{"/dev/nvidiactl", 195, 255}, node{"/dev/nvidia-uvm", 510, 0}, node{"/dev/nvidia-uvm-tools", 510, 1}
	tests := []struct {
		name  string
		chars []string // character devices under the dev root
		minor int
		want  []node
	}{
		{"all nodes, GPU 1", []string{"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}, 1,
			[]node{{"/dev/nvidia1", 195, 1}, ctl, uvm, tools}},
		{"all nodes, GPU 0", []string{"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}, 0,
			[]node{{"/dev/nvidia0", 195, 0}, ctl, uvm, tools}},
		{"no uvm-tools", []string{"nvidia1", "nvidiactl", "nvidia-uvm"}, 1,
			[]node{{"/dev/nvidia1", 195, 1}, ctl, uvm}},
		{"GPU node missing", []string{"nvidia0", "nvidiactl"}, 1, []node{ctl}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			devRoot := charDevRoot(t, tt.chars...)
			o := Options{Dir: t.TempDir(), DevRoot: devRoot}
			d := hostDevices()[0]
			d.GPU.Minor = tt.minor
			writeAndLoad(t, o, []Device{d})
			s := container()
			if _, err := loadCache(t, o.Dir).InjectDevices(s, QualifiedName(DefaultKind, d.Name().String())); err != nil {
				t.Fatal(err)
			}
			var got []node
			for _, dev := range s.Linux.Devices {
				if dev.Type != "c" {
					t.Errorf("%s: type %q, want c", dev.Path, dev.Type)
				}
				got = append(got, node{dev.Path, dev.Major, dev.Minor})
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("device nodes:\n got %v\nwant %v", got, tt.want)
			}
			if s.Linux.Resources == nil || len(s.Linux.Resources.Devices) != len(tt.want) {
				t.Fatalf("cgroup device rules: %+v, want one per node", s.Linux.Resources)
			}
			for i, r := range s.Linux.Resources.Devices {
				if !r.Allow || r.Access != "rw" || r.Type != "c" || *r.Major != tt.want[i].major || *r.Minor != tt.want[i].minor {
					t.Errorf("cgroup rule %d: %+v (major %d minor %d), want allow rw c %d:%d",
						i, r, *r.Major, *r.Minor, tt.want[i].major, tt.want[i].minor)
				}
			}
			// The spec names the host node under the dev root.
			spec, err := Build(o, []Device{d})
			if err != nil {
				t.Fatal(err)
			}
			if hp := spec.Devices[0].ContainerEdits.DeviceNodes[0].HostPath; filepath.Dir(hp) != devRoot {
				t.Errorf("host path %q is not under the dev root %q", hp, devRoot)
			}
		})
	}
}

// TestInjectHostDevRoot: with the real /dev as dev root the spec names only
// the container path, as nvidia-ctk's specs do.
func TestInjectHostDevRoot(t *testing.T) {
	d := hostDevices()[1]
	s := build(Options{Kind: DefaultKind, ShmPath: DefaultShmPath, DevRoot: "/dev"}.settle(), []Device{d},
		nodeSet{"nvidia0": true, "nvidiactl": true})
	nodes := s.Devices[0].ContainerEdits.DeviceNodes
	if len(nodes) != 2 || nodes[0].Path != "/dev/nvidia0" || nodes[0].HostPath != "" || nodes[1].Path != "/dev/nvidiactl" {
		for _, n := range nodes {
			t.Logf("node %+v", *n)
		}
		t.Error("want /dev/nvidia0 and /dev/nvidiactl without host paths")
	}
}
