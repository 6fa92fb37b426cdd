// Package cdi writes the host's Container Device Interface spec: one CDI
// device per MPS virtual device, so `podman run --device
// yunion.io/mps-gpu=GPU-…::3` (or containerd/CRI-O with CDI enabled) gives a
// container the GPU's MPS pipe directory, the device's caps in the
// environment and, read-only, the file naming the device that the accounting
// finds again through /proc/<pid>/root (pkg/identity); with the view on
// (Options.View, pkg/view), the library that answers CUDA's and NVML's
// questions about the GPU's memory with the device's cap, the preload list
// that loads it in every process, and the device's view directory.
//
// Build turns the virtual devices into a spec in memory and refuses every
// state a runtime could not use or that would hand out the wrong device, with
// the CDI library's own checks among ours; Write replaces the spec file
// atomically and only when its bytes change, after the CDI library has
// loaded the exact bytes from a temporary file beside it (Writer, whose
// specs only Build's code makes, skips that load). A runtime therefore sees
// the old spec or the new one, never a broken one.
package cdi

import "yunion.io/x/mps-daemon/pkg/vdev"

// Defaults of Options.
const (
	// DefaultDir is where CDI runtimes look for generated specs
	// (the CDI library's DefaultDynamicDir).
	DefaultDir = "/var/run/cdi"
	// DefaultKind is the vendor/class of our devices.
	DefaultKind = "yunion.io/mps-gpu"
	// DefaultShmPath is the host's POSIX shared memory.
	DefaultShmPath = "/dev/shm"
	// DefaultDevRoot is the host's /dev.
	DefaultDevRoot = "/dev"
	// NoShm as ShmPath leaves the container's own /dev/shm alone.
	NoShm = "none"
)

// Environment variables every container given a virtual device gets,
// besides vdev.EnvVar, which names the device.
const (
	// EnvPipeDirectory tells the CUDA driver where the MPS control daemon is.
	EnvPipeDirectory = "CUDA_MPS_PIPE_DIRECTORY"
	// EnvMemoryLimit is the client's pinned device memory limit.
	EnvMemoryLimit = vdev.EnvMemoryLimit
	// EnvThreadPercentage is the client's active thread percentage.
	EnvThreadPercentage = vdev.EnvThreadPercentage
	// EnvClientPriority is the client's MPS priority: 0 normal, 1 below
	// normal (a batch device of a GPU with mps_qos).
	EnvClientPriority = vdev.EnvClientPriority
	// EnvVisibleDevices is read by the NVIDIA container toolkit.
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// EnvCUDAVisibleDevices is read by the CUDA driver: the container's
	// one GPU, by UUID. A client's view of the GPUs is its MPS server's,
	// whatever device nodes its container holds, and its device ordinals
	// count that view (docs/gpu-runs/mps-probe-multi.txt): in the single
	// layout, whose daemon serves every GPU, a client without it sees them
	// all and works on the first; naming its GPU puts it there, as ordinal
	// 0, which is what CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=... caps.
	EnvCUDAVisibleDevices = vdev.EnvCUDAVisibleDevices
)

// Options say where the spec goes and what the host looks like. Zero values
// take the defaults above.
type Options struct {
	// Dir is the spec directory (host.conf mps_cdi_directory).
	Dir string
	// Kind is "vendor/class"; the file is named "vendor-class.yaml".
	Kind string
	// ShmPath is bind-mounted at /dev/shm in the container; NoShm leaves it out.
	ShmPath string
	// DevRoot is the host's /dev, where /dev/nvidia* nodes are looked for.
	DevRoot string
	// View gives every device's containers the view (pkg/view); the zero
	// View gives none, and the spec is what it is without it.
	View View
}

// View is where the host keeps what gives a container the view of its
// device (pkg/view, docs/containers.md): the library, mounted read-only
// at view.ContainerLibrary; the platform directory the preload list names
// it through, mounted read-only at view.ContainerPlatforms; and the
// preload list, mounted read-only over /etc/ld.so.preload. Each device's
// own view directory is Device.ViewDir.
type View struct {
	// Library is the host's libyunion-mps-view.so (host.conf
	// mps_view_library); the caller has found it there.
	Library string
	// Platforms is the host's platform directory
	// (view.Store.PlatformsPath).
	Platforms string
	// Preload is the host's preload list (view.Store.PreloadPath).
	Preload string
}

// On says whether containers get the view.
func (v View) On() bool { return v.Library != "" }

// settled is Options with the defaults filled in. Options.settle is the
// one place the defaults are applied: each exported entry (Build, Edits,
// Write, Remove, SpecPath, Sync, Writer.Sync) settles its options once,
// and what it calls takes them settled, so no path fills them twice.
type settled struct{ Options }

func (o Options) settle() settled {
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	if o.Kind == "" {
		o.Kind = DefaultKind
	}
	if o.ShmPath == "" {
		o.ShmPath = DefaultShmPath
	}
	if o.DevRoot == "" {
		o.DevRoot = DefaultDevRoot
	}
	return settled{o}
}

// Device is one virtual device as a container gets it: the planned device
// (its GPU, slice, caps and class) and where its container finds MPS.
type Device struct {
	vdev.Device
	// ID is the inventory id; empty before the first sync, and then the
	// device is only reachable by its name.
	ID string
	// PipeDir is the GPU's MPS pipe directory on the host.
	PipeDir string
	// IdentityFile is the host file naming the device (identity.Store),
	// mounted read-only at identity.ContainerPath(GPU.UUID): what the
	// accounting finds again through /proc/<pid>/root.
	IdentityFile string
	// ViewDir is the host directory of the device's view (view.Store),
	// mounted read-only at view.ContainerDir(GPU.UUID) when Options.View
	// is on; ignored when it is off.
	ViewDir string
	// ClientPriority is vdev.PriorityNormal or vdev.PriorityBelowNormal:
	// its class's (FromVirtual), or, for a device held past its plan whose
	// class is not known any more, its GPU's control daemon default.
	ClientPriority int
}

// FromVirtual is the CDI view of a planned virtual device; id is its
// inventory id ("" when not synced yet), pipeDir its GPU's pipe directory.
// IdentityFile and ViewDir are left for the caller, which makes them.
func FromVirtual(v vdev.Device, id, pipeDir string) Device {
	return Device{Device: v, ID: id, PipeDir: pipeDir, ClientPriority: v.Class.ClientPriority()}
}

// QualifiedName is what a runtime is given: "yunion.io/mps-gpu=GPU-…::3".
func QualifiedName(kind, name string) string { return kind + "=" + name }

// DeviceName is the name a runtime is given for virtual device n in the
// host's spec (DefaultKind): what the backends record and publish.
func DeviceName(n vdev.Name) string { return QualifiedName(DefaultKind, n.String()) }
