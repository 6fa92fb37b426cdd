package cdi

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"yunion.io/x/mps-daemon/pkg/identity"
	"yunion.io/x/mps-daemon/pkg/vdev"
	"yunion.io/x/mps-daemon/pkg/view"
)

// Mount options. The pipe directory is read-only: a client only connects to
// the sockets in it, which a read-only bind mount allows (connect(2) checks
// the socket's permissions, not the mount's), and it keeps a container from
// deleting or replacing the sockets every other container on the GPU uses.
// The shared memory is writable: a client that uses it creates segments
// there. Measured, with the reasons: docs/containers.md.
// The identity file and the mask over the privileged socket are read-only
// too: neither their content nor, without CAP_SYS_ADMIN, the mount can be
// changed from inside.
// The view's library is the one mount without noexec: a library on a
// noexec mount cannot be mapped executable, and the dynamic linker would
// refuse to preload it.
var (
	readOnlyMountOptions = []string{"ro", "nosuid", "nodev", "noexec", "bind"}
	shmMountOptions      = []string{"rw", "nosuid", "nodev", "noexec", "bind"}
	libraryMountOptions  = []string{"ro", "nosuid", "nodev", "bind"}
)

// privilegedSocket is the control daemon's socket for privileged commands
// (quit, set_default_*, limits of running servers), which it grants to root.
// Root in a container without a user namespace is root to it: measured, such
// a process changed the default thread percentage through the read-only
// pipe directory. CUDA clients use only "control". The spec hides this one
// under /dev/null; then the daemon refuses root in the container
// ("Insufficient privileges for UID 0", measured) and clients still work.
const privilegedSocket = "control_privileged"

// Build is the CDI spec of these virtual devices: one entry per device named
// "<GPU UUID>::<i>", and a second, identical one named by its inventory id
// once it has one. It reads only which /dev/nvidia* nodes exist under
// o.DevRoot and writes nothing. Any input a container could not use, or that
// would hand out the wrong GPU or caps, is an error wrapping ErrInvalid; an
// empty list is ErrNoDevices. No error ever comes with a spec.
func Build(opts Options, devs []Device) (*specs.Spec, error) {
	o := opts.settle()
	if err := o.validate(); err != nil {
		return nil, err
	}
	if len(devs) == 0 {
		return nil, ErrNoDevices
	}
	if err := validateDevices(o, devs); err != nil {
		return nil, err
	}
	nodes, err := findNodes(o.DevRoot, minorsOf(devs))
	if err != nil {
		return nil, err
	}
	s := build(o, devs, nodes)
	if err := validateSpec(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Edits are the edits of d's entry, as Build makes them, for whoever
// hands them to a container without a CDI runtime (the NRI plugin,
// pkg/nri): the same inputs are refused, nothing is written.
func Edits(opts Options, d Device) (specs.ContainerEdits, error) {
	o := opts.settle()
	if err := o.validate(); err != nil {
		return specs.ContainerEdits{}, err
	}
	if err := validateDevices(o, []Device{d}); err != nil {
		return specs.ContainerEdits{}, err
	}
	nodes, err := findNodes(o.DevRoot, minorsOf([]Device{d}))
	if err != nil {
		return specs.ContainerEdits{}, err
	}
	return containerEdits(o, d, nodes), nil
}

// build assembles the spec from validated inputs; devices sorted by GPU and
// slice so the same inputs give the same bytes whatever their order.
func build(o settled, devs []Device, nodes nodeSet) *specs.Spec {
	sorted := slices.Clone(devs)
	sort.Slice(sorted, func(i, j int) bool { return byGPUIndex(sorted[i], sorted[j]) < 0 })
	// No annotations: they need cdiVersion 0.6.0, which Debian 12's Podman
	// (4.3.1) refuses (docs/runs/podman-cdi-version.md). The file's header
	// names its writer; the identity file and YUNION_MPS_VIRTUAL_DEVICE name
	// the device.
	s := &specs.Spec{Kind: o.Kind}
	for _, d := range sorted {
		// Two names, the same edits: the stable name and the inventory id.
		// Each entry gets its own copy, so editing one leaves the other.
		for _, n := range deviceNames(d) {
			s.Devices = append(s.Devices, specs.Device{
				Name:           n,
				ContainerEdits: containerEdits(o, d, nodes),
			})
		}
	}
	// The oldest version that holds what we use, so older runtimes load it:
	// 0.5.0 once a device has an inventory id (a name starting with a digit)
	// or a node with a host path, else 0.4.0 (mount types).
	s.Version, _ = specs.MinimumRequiredVersion(s)
	return s
}

// containerEdits is what a container given d gets; docs/containers.md lists
// the same, and why.
func containerEdits(o settled, d Device, nodes nodeSet) specs.ContainerEdits {
	e := specs.ContainerEdits{
		Env: []string{
			EnvVisibleDevices + "=" + d.GPU.UUID.String(),
			EnvCUDAVisibleDevices + "=" + d.GPU.UUID.String(),
			EnvPipeDirectory + "=" + d.PipeDir,
			// Device 0: the one GPU CUDA_VISIBLE_DEVICES shows it.
			EnvMemoryLimit + "=" + fmt.Sprintf("0=%dM", d.MemoryLimit),
			EnvThreadPercentage + "=" + strconv.Itoa(d.ThreadPercentage),
			EnvClientPriority + "=" + strconv.Itoa(d.ClientPriority),
			vdev.EnvVar + "=" + d.Name().String(),
		},
		Mounts: []*specs.Mount{{
			HostPath:      d.PipeDir,
			ContainerPath: d.PipeDir,
			Type:          "bind",
			Options:       slices.Clone(readOnlyMountOptions),
		}, {
			// Over the socket, inside the mount above (runtimes mount
			// shallower paths first). Should the socket be missing, the
			// runtime would have to create the mount point in the
			// read-only directory, so the container should fail to start
			// rather than run CUDA outside MPS, uncapped.
			HostPath:      "/dev/null",
			ContainerPath: filepath.Join(d.PipeDir, privilegedSocket),
			Type:          "bind",
			Options:       slices.Clone(readOnlyMountOptions),
		}, {
			HostPath:      d.IdentityFile,
			ContainerPath: identity.ContainerPath(d.GPU.UUID),
			Type:          "bind",
			Options:       slices.Clone(readOnlyMountOptions),
		}},
	}
	if o.ShmPath != NoShm {
		e.Mounts = append(e.Mounts, &specs.Mount{
			HostPath:      o.ShmPath,
			ContainerPath: "/dev/shm",
			Type:          "bind",
			Options:       slices.Clone(shmMountOptions),
		})
	}
	if o.View.On() {
		e.Mounts = append(e.Mounts, viewMounts(o.View, d)...)
	}
	for _, n := range append([]string{"nvidia" + strconv.Itoa(d.GPU.Minor)}, controlNodes[:]...) {
		if !nodes[n] {
			continue
		}
		dn := &specs.DeviceNode{Path: "/dev/" + n, Permissions: "rw"}
		if host := filepath.Join(o.DevRoot, n); host != dn.Path {
			dn.HostPath = host
		}
		e.DeviceNodes = append(e.DeviceNodes, dn)
	}
	return e
}

// viewMounts give a container of d the view (docs/containers.md): every
// dynamically linked glibc process of the container preloads the library
// (the preload list over the image's own /etc/ld.so.preload, whatever the
// process's environment), which reads the device's view file from its
// directory; the list names it through the platform directory, where a
// process of another platform finds a stub instead. A container given
// devices of several GPUs gets the library, the platform directory and
// the list once (CDI replaces a mount at the same container path) and
// each GPU's directory.
func viewMounts(v View, d Device) []*specs.Mount {
	return []*specs.Mount{{
		HostPath:      v.Library,
		ContainerPath: view.ContainerLibrary,
		Type:          "bind",
		Options:       slices.Clone(libraryMountOptions),
	}, {
		// Links and stubs, whose one segment is not executable; but a
		// 32-bit program without PT_GNU_STACK runs with READ_IMPLIES_EXEC,
		// which maps it executable: no noexec, as for the library.
		HostPath:      v.Platforms,
		ContainerPath: view.ContainerPlatforms,
		Type:          "bind",
		Options:       slices.Clone(libraryMountOptions),
	}, {
		HostPath:      v.Preload,
		ContainerPath: view.ContainerPreload,
		Type:          "bind",
		Options:       slices.Clone(readOnlyMountOptions),
	}, {
		// The directory, not the file: the daemon replaces the file
		// (rename), and a file's bind mount would keep the old one.
		HostPath:      d.ViewDir,
		ContainerPath: view.ContainerDir(d.GPU.UUID),
		Type:          "bind",
		Options:       slices.Clone(readOnlyMountOptions),
	}}
}

// byGPUIndex orders devices by GPU, then index on it: the spec's order.
func byGPUIndex(a, b Device) int {
	return cmp.Or(cmp.Compare(a.GPU.UUID, b.GPU.UUID), cmp.Compare(a.Index, b.Index))
}
