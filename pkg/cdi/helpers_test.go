package cdi

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/identity"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

const (
	gpuA = "GPU-4baeae3a-899f-8852-bd11-2e4ce3171eb0"
	gpuB = "GPU-76aef7ff-372d-2432-b4b4-beca4d8d3400"
	idA0 = "604b59e6-745b-4834-8c19-229af27c4333"
	idA1 = "197c1d98-316a-42e6-889d-68497153cc82"
)

// hostDevices is a host with two GPUs: A split in two (ids known), B in
// four, only slice 2 synced.
func hostDevices() []Device {
	pipeA := "/tmp/nvidia-mps/pipe/" + gpuA
	pipeB := "/tmp/nvidia-mps/pipe/" + gpuB
	devs := []Device{
		// GPU B has mps_qos: slice 0 latency, the others batch (30%,
		// below normal priority).
		device(gpuB, 1, 2, "0f9a3c52-1d7e-4b8a-9e61-3c2d5f7a8b90", pipeB, 35942, 30, 1),
		device(gpuA, 0, 0, idA0, pipeA, 71885, 50, 0),
		device(gpuA, 0, 1, idA1, pipeA, 71885, 50, 0),
		device(gpuB, 1, 0, "", pipeB, 35942, 100, 0),
		device(gpuB, 1, 1, "", pipeB, 35942, 30, 1),
		device(gpuB, 1, 3, "", pipeB, 35942, 30, 1),
	}
	for i := range devs {
		devs[i].IdentityFile = identityFile(devs[i].GPU.UUID, devs[i].Index)
	}
	return devs
}

// device is slice index of the GPU uuid (/dev/nvidia<minor>) as a
// container gets it.
func device(uuid gpu.UUID, minor, index int, id, pipe string, limit units.MiB, threads, priority int) Device {
	v := vdev.Device{GPU: gpu.Info{UUID: uuid, Minor: minor}, Index: index, MemoryLimit: limit, ThreadPercentage: threads}
	return Device{Device: v, ID: id, PipeDir: pipe, ClientPriority: priority}
}

// identityFile is where the daemon's default state directory keeps a
// device's identity file (identity.Store); Build never reads it.
func identityFile(uuid gpu.UUID, i int) string {
	p, err := identity.Store{Dir: "/var/lib/yunion-mps/identity"}.Path(vdev.NameOf(uuid, i))
	if err != nil {
		panic(err)
	}
	return p
}

// simDevRoot is a /dev like the simulated host's: the nvidia nodes exist as
// plain files, which must not become device nodes in the spec.
func simDevRoot(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range []string{"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// charDevRoot makes real character devices (the numbers the NVIDIA driver
// uses) for the names given; the test is skipped where mknod is not allowed.
func charDevRoot(t *testing.T, names ...string) string {
	t.Helper()
	numbers := map[string][2]int{
		"nvidia0": {195, 0}, "nvidia1": {195, 1}, "nvidiactl": {195, 255},
		"nvidia-uvm": {510, 0}, "nvidia-uvm-tools": {510, 1},
	}
	dir := t.TempDir()
	for _, n := range names {
		mm := numbers[n]
		err := syscall.Mknod(filepath.Join(dir, n), syscall.S_IFCHR|0o666, mm[0]<<8|mm[1])
		if err == syscall.EPERM {
			t.Skipf("mknod not permitted here: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func testOptions(t *testing.T) Options {
	return Options{Dir: t.TempDir(), DevRoot: simDevRoot(t)}
}

// loadCache loads dir as a runtime does, failing on any spec error.
func loadCache(t *testing.T, dir string) *cdiapi.Cache {
	t.Helper()
	c, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := c.GetErrors(); len(errs) > 0 {
		t.Fatalf("the CDI library refused the written spec: %v", errs)
	}
	return c
}

// dirNames lists dir, to prove nothing but the spec is there.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// fileID is what tells a rename (new inode) and a rewrite apart.
type fileID struct {
	ino   uint64
	mtime int64
}

func statID(t *testing.T, path string) fileID {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		t.Fatal("no inode numbers on this platform")
	}
	return fileID{ino: st.Ino, mtime: fi.ModTime().UnixNano()}
}

// mustBuild is Build, failing t on an error.
func mustBuild(t *testing.T, o Options, devs []Device) *specs.Spec {
	t.Helper()
	spec, err := Build(o, devs)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}
