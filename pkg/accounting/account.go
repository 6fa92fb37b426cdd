package accounting

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

	"yunion.io/x/mps-daemon/pkg/clientreport"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/pod"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// Client is one MPS client process billed to a virtual device.
type Client struct {
	PID        int
	UsedBytes  uint64
	StartTicks uint64 // see Identity.StartTicks
	// Source says how its device was learnt (see Identity.Source).
	Source string
	// Env is what its initial environment says of its QoS.
	Env clientreport.QoSEnv
	// WithoutView: its memory map shows no view library, when the
	// containers get the view (Accountant.SetViewLibrary; view.go).
	WithoutView bool
	// Pod is the Cloudpods pod it is in (Source SourcePod; pods.go).
	Pod pod.Pod
}

// DeviceUsage is the memory the clients of one virtual device use together.
type DeviceUsage struct {
	GPU       gpu.UUID
	UsedBytes uint64
	// PIDs are the clients' PIDs, ascending; Clients the same, with detail.
	PIDs    []int
	Clients []Client
	// WithoutView counts the clients without the device's view (view.go).
	WithoutView int
}

// UnknownProcess is an MPS client that is billed to no device: it names
// none, names one badly, names one of another GPU or one this host does not
// have, its /proc entry could not be read, or it is in a container whose
// device cannot be established (Hidden). Unknown processes are reported
// (the embedded clientreport.Unknown is what /status shows); only the
// hidden ones are terminated, under enforce (DecideHidden).
type UnknownProcess struct {
	clientreport.Unknown
	// Hidden: in a container (not the host's mount namespace) where neither
	// it nor its cgroup shows one device of the GPU (ErrNoIdentity).
	Hidden bool
	// StartTicks identifies the process, when its stat was read.
	StartTicks uint64
}

func (u UnknownProcess) gpuPID() (gpu.UUID, int) { return u.GPU, u.PID }

// Mismatch is a client billed by its identity file whose own view
// disagrees: its environment names another device or none, or its identity
// file is hidden from it (billed through an ancestor). It is billed to
// Device all the same, and reported (the embedded clientreport.Mismatch).
type Mismatch struct {
	clientreport.Mismatch
	// StartTicks identifies the process (see Client.StartTicks), so a
	// reused PID is reported afresh.
	StartTicks uint64
}

func (m Mismatch) gpuPID() (gpu.UUID, int) { return m.GPU, m.PID }

// byGPUThenPID sorts reported processes as logs and /status list them.
func byGPUThenPID[T interface{ gpuPID() (gpu.UUID, int) }](s []T) {
	sort.Slice(s, func(i, j int) bool {
		ag, ap := s[i].gpuPID()
		bg, bp := s[j].gpuPID()
		return cmp.Or(cmp.Compare(ag, bg), cmp.Compare(ap, bp)) < 0
	})
}

// Usage is one sample of accounting.
type Usage struct {
	// PerDevice holds every device of caps whose GPU was sampled, those
	// without clients too (UsedBytes 0). A device missing here was not
	// measured (its GPU's listing failed), which is not the same as unused.
	PerDevice map[string]DeviceUsage
	// Unknown is sorted by GPU then PID.
	Unknown []UnknownProcess
	// Mismatches are clients counted in PerDevice whose environment or own
	// view disagree with their identity; sorted by GPU then PID.
	Mismatches []Mismatch
	// Escapes are clients of batch devices whose environment escapes the
	// device's QoS (Escapes); sorted by GPU then PID.
	Escapes []Escape
	// WithoutView are billed clients without their device's view, or
	// whose map could not be read (view.go); sorted by GPU then PID.
	WithoutView []WithoutView
}

// LookupFunc names the device of a PID that NVML lists on a GPU;
// Mapper.Lookup is one.
type LookupFunc func(pid int, gpuUUID gpu.UUID) (Identity, error)

// Account bills each MPS client of procs (GPU UUID -> NVML's list) to its
// virtual device. caps's keys are the host's virtual devices; their values
// are not used here. A process is billed only to a device of the GPU NVML
// saw it on.
func Account(procs map[gpu.UUID][]gpu.Process, caps map[string]uint64, lookup LookupFunc) Usage {
	u := Usage{PerDevice: map[string]DeviceUsage{}}
	u.devicesOf(caps, func(g gpu.UUID) bool { _, sampled := procs[g]; return sampled })
	for _, uuid := range slices.Sorted(maps.Keys(procs)) {
		for _, p := range procs[uuid] {
			id, err := lookup(p.PID, uuid)
			u.bill(uuid, p, id, err)
		}
	}
	u.sort()
	return u
}

// devicesOf puts every device of caps whose GPU is of gpus in u.PerDevice,
// with no client yet.
func (u *Usage) devicesOf(caps map[string]uint64, gpus func(gpu.UUID) bool) {
	for name := range caps {
		uuid, ok := gpuOf(name)
		if !ok {
			continue
		}
		if gpus(uuid) {
			u.PerDevice[name] = DeviceUsage{GPU: uuid}
		}
	}
}

// bill adds client p of GPU uuid, whose lookup said id and err, to its
// device of u.PerDevice, or to u.Unknown; a mismatch to u.Mismatches.
func (u *Usage) bill(uuid gpu.UUID, p gpu.Process, id Identity, err error) (billed bool) {
	unknown := UnknownProcess{Unknown: clientreport.Unknown{PID: p.PID, GPU: uuid, UsedBytes: units.Bytes(p.UsedMemoryBytes),
		Device: id.Device, Source: id.Source, Environment: id.Environment}, StartTicks: id.StartTicks}
	if errors.Is(err, ErrNoPodSlice) {
		unknown.Server = id.Pod.Server
	}
	switch {
	case err != nil:
		unknown.Reason = join(reason(err), id.Detail)
		unknown.Hidden = errors.Is(err, ErrNoIdentity)
	default:
		devGPU, _ := gpuOf(id.Device)
		d, ok := u.PerDevice[id.Device]
		switch {
		case devGPU != uuid:
			unknown.Reason = fmt.Sprintf("names %s, a device of GPU %s", id.Device, devGPU)
		case !ok:
			unknown.Reason = fmt.Sprintf("names %s, which this host does not have", id.Device)
		default:
			d.UsedBytes += p.UsedMemoryBytes
			c := Client{PID: p.PID, UsedBytes: p.UsedMemoryBytes, StartTicks: id.StartTicks, Source: id.Source, Env: id.QoSEnv, Pod: id.Pod}
			d.Clients = append(d.Clients, c)
			u.PerDevice[id.Device] = d
			if id.Mismatch() {
				u.Mismatches = append(u.Mismatches, Mismatch{Mismatch: clientreport.Mismatch{PID: c.PID, GPU: uuid,
					UsedBytes: units.Bytes(c.UsedBytes), Device: id.Device, Source: c.Source, Environment: id.Environment,
					Reason: mismatchReason(id)}, StartTicks: c.StartTicks})
			}
			return true
		}
	}
	u.Unknown = append(u.Unknown, unknown)
	return false
}

// sort orders u's lists as logs and /status show them.
func (u *Usage) sort() {
	byGPUThenPID(u.Unknown)
	byGPUThenPID(u.Mismatches)
	for name, d := range u.PerDevice {
		sort.Slice(d.Clients, func(i, j int) bool { return d.Clients[i].PID < d.Clients[j].PID })
		d.PIDs = make([]int, len(d.Clients))
		for i, c := range d.Clients {
			d.PIDs[i] = c.PID
		}
		u.PerDevice[name] = d
	}
}

// reason is an unknown process's reason, short enough for a status field.
func reason(err error) string {
	switch {
	case errors.Is(err, ErrNoDevice):
		return "names no virtual device (" + vdev.EnvVar + " unset or empty)"
	case errors.Is(err, ErrExited):
		return "exited before it could be mapped"
	case errors.Is(err, ErrNoIdentity):
		return "in a container (not the host's mount namespace) where no identity file of its GPU establishes its device; " +
			"its environment is not believed"
	case errors.Is(err, ErrHostSandbox):
		return "outside the host's mount namespace, but its root directory is the host's (a host service in a mount namespace of its own, " +
			"not a container); its environment is not believed; reported, never terminated"
	case errors.Is(err, ErrUnverified):
		return "no identity file of its GPU found, and the host's identity files or mount namespace could not be read: " +
			"not known to be in a container; its environment is not believed; reported, never terminated"
	}
	return err.Error()
}

// mismatchReason says what disagrees and what was believed.
func mismatchReason(id Identity) string {
	var env string
	switch id.Environment {
	case id.Device:
	case "":
		env = "its environment names no device (" + vdev.EnvVar + " unset)"
	default:
		env = "its environment names " + id.Environment
	}
	var view string
	if id.Source == SourceAncestor {
		view = "its own view hides its identity file"
	}
	return join(join(env, view), id.Detail) + "; billed to " + id.Device + " by its identity file"
}

// Lister is what Sample needs of NVML; gpu.Backend is one.
type Lister interface {
	MPSProcesses(ctx context.Context, uuid gpu.UUID) ([]gpu.Process, error)
}

// Sample lists the MPS clients of each GPU. A GPU whose listing fails is
// left out of the map (its devices then count as not measured, see
// Usage.PerDevice) and its error joined into the one returned.
func Sample(ctx context.Context, l Lister, gpus []gpu.UUID) (map[gpu.UUID][]gpu.Process, error) {
	out := make(map[gpu.UUID][]gpu.Process, len(gpus))
	var errs []error
	for _, uuid := range gpus {
		procs, err := l.MPSProcesses(ctx, uuid)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[uuid] = procs
	}
	return out, errors.Join(errs...)
}
