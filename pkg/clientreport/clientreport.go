// Package clientreport holds what the accounting reports about an MPS client
// process: the QoS its initial environment asks for (QoSEnv), a client it
// could bill to no device (Unknown), one whose own view disagrees with its
// identity file (Mismatch), one whose environment escapes its device's
// memory limit or its batch device's QoS (Escape), and one that sees the
// whole GPU instead of its device's view (WithoutView). Each fact is one
// type: pkg/accounting builds and works with these values (embedding them
// where it keeps more, such as the start time that tells a reused PID),
// and pkg/status carries the same values in /status, so nothing is copied
// from one form into another on the way.
//
// It is data only. It imports pkg/gpu for gpu.UUID alone, the one type a
// GPU's UUID has wherever it is held (JSON writes it as the string it is),
// and pkg/units; the field names and tags are those of /status.
package clientreport

import (
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/units"
)

// Unknown is an MPS client billed to no device: it names none, names one
// badly, names one of another GPU or one the host does not have, its /proc
// entry could not be read, or it is in a container whose device cannot be
// established.
type Unknown struct {
	PID       int         `json:"pid"`
	GPU       gpu.UUID    `json:"gpu"`
	UsedBytes units.Bytes `json:"used_bytes"`
	// Device is the device it was identified as (Source: identity,
	// ancestor or environ) when that is one it cannot be billed to.
	Device string `json:"device,omitempty"`
	Source string `json:"source,omitempty"`
	// Environment is the device its environment names, if any: not
	// believed for a process in a container.
	Environment string `json:"environment,omitempty"`
	// Server is the Cloudpods server whose pod it is in (pkg/pod), when
	// that server holds no slice of its GPU.
	Server string `json:"server,omitempty"`
	Reason string `json:"reason"`
}

// Mismatch is an MPS client billed by its identity file whose environment
// names another device or none, or whose own view hid the file. It is
// billed to Device all the same.
type Mismatch struct {
	PID       int         `json:"pid"`
	GPU       gpu.UUID    `json:"gpu"`
	UsedBytes units.Bytes `json:"used_bytes"`
	// Device is the device it is billed to, Source how that was learnt.
	Device string `json:"device"`
	Source string `json:"source"`
	// Environment is what YUNION_MPS_VIRTUAL_DEVICE says ("" unset).
	Environment string `json:"environment"`
	Reason      string `json:"reason"`
}

// Escape is a client whose environment escapes its device's memory limit
// (a CUDA_MPS_PINNED_DEVICE_MEM_LIMIT that MPS cannot take, which leaves it
// no limit at all) or its batch device's QoS (it lacks or raises
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE or CUDA_MPS_CLIENT_PRIORITY); Reason
// says how.
type Escape struct {
	PID       int         `json:"pid"`
	GPU       gpu.UUID    `json:"gpu"`
	UsedBytes units.Bytes `json:"used_bytes"`
	// Device is the device it is billed to, Source how that was learnt.
	Device      string `json:"device"`
	Source      string `json:"source"`
	Environment QoSEnv `json:"environment"`
	// Server is the Cloudpods server whose pod it is in, when it is
	// billed to a pod (Device is then the pod's name).
	Server string `json:"server,omitempty"`
	Reason string `json:"reason"`
}

// WithoutView is an MPS client billed to a device that does not have the
// device's view (docs/containers.md, "What software in a slice sees"): no
// libyunion-mps-view.so in its memory map, so CUDA and NVML tell it the
// whole GPU's memory, not its device's cap (a static or musl program, a
// process outside containers, one whose library could not load); or its
// map could not be read (Reason says which). It is reported, never
// terminated: its caps hold as any client's.
type WithoutView struct {
	PID       int         `json:"pid"`
	GPU       gpu.UUID    `json:"gpu"`
	UsedBytes units.Bytes `json:"used_bytes"`
	// Device is the device it is billed to, Source how that was learnt.
	Device string `json:"device"`
	Source string `json:"source"`
	Reason string `json:"reason"`
}

// QoSEnv is what a process's initial environment says of its QoS, as the
// accounting reads it.
type QoSEnv struct {
	ThreadPercentage EnvValue `json:"thread_percentage"`
	ClientPriority   EnvValue `json:"client_priority"`
	// MemoryLimit is CUDA_MPS_PINNED_DEVICE_MEM_LIMIT.
	MemoryLimit EnvValue `json:"memory_limit"`
	// Unreadable says why the environment could not be read (larger than
	// the accounting reads, for one); then nothing in it is known.
	Unreadable string `json:"unreadable,omitempty"`
}

// EnvValue is one variable of a process's initial environment.
type EnvValue struct {
	Value string `json:"value,omitempty"`
	Set   bool   `json:"set"`
	// Twice: set twice with different values; which one CUDA reads is not
	// known, so neither is believed.
	Twice bool `json:"twice,omitempty"`
}
