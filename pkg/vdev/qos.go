package vdev

import (
	"fmt"
	"slices"

	"yunion.io/x/mps-daemon/pkg/gpu"
)

// Per-device QoS (issue 13). A latency-bound tenant (small-batch inference)
// beside tenants that keep the GPU saturated waits behind their kernels:
// measured on an H100 with 7 saturating neighbours, its p99 step latency
// was 192 times its solo p99 without caps and 91 times under the default
// 400/N. What brings it back to solo is leaving it SMs nobody else may use:
// the neighbours capped so that their shares add up to less than the
// whole GPU (docs/benchmarks.md, "One tenant beside saturating
// neighbours"). MPS offers two knobs per client, both set here per device:
//
//   - the active thread percentage, a CEILING on the SMs a client's
//     kernels may occupy; the server's default is the most a client can
//     get, and a client can only lower its own below it;
//   - the client priority, 0 (normal) or 1 (below normal): a scheduling
//     HINT, which any client can set for itself, raising it as well.
//
// A device YAML entry's mps_qos names latency slices; every other slice of
// the GPU is a batch slice: capped so that the batch slices together leave
// `reserve` percent of the SMs free, and below normal priority. A latency
// slice gets the even share, 100/N (issue 23): measured by hand on an H100
// at N=8 (docs/benchmarks.md), the latency client at 12% and priority 0
// beside batch clients at 13% and priority 1 was as fast as alone (1.06x)
// while the batch clients kept 0.85 of their no-cap throughput; plain 100/N
// gave 1.1x and 0.73, and the latency client at 50% (the share `mps_qos`
// gave it before) no better (1.2x) while through the daemon it measured
// 2.1x. With the latency share at or below the batch share, the control
// daemon's default, the largest share of the GPU, is the batch share: MPS
// itself then holds a batch client that drops its variable to its share.

// Class is what a virtual device is for.
type Class string

// Classes. A GPU without mps_qos has only ClassShared devices.
const (
	// ClassShared: no QoS on its GPU; every device alike.
	ClassShared Class = ""
	// ClassLatency: for latency-bound tenants; the even share
	// (LatencyShare) and normal priority.
	ClassLatency Class = "latency"
	// ClassBatch: for throughput-bound tenants; the batch share and below
	// normal priority.
	ClassBatch Class = "batch"
)

// The variables a client reads its QoS from, set by each device's CDI
// edits and checked by the accounting in the environment of a batch
// device's processes.
const (
	EnvThreadPercentage = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	EnvClientPriority   = "CUDA_MPS_CLIENT_PRIORITY"
)

// The variables that put a client on its device's GPU under its device's
// memory cap, set by each device's CDI edits and checked by the accounting
// in the environment of every device's processes: MPS lifts a client's
// pinned memory limit altogether when its own list names a device it does
// not have or does not parse (docs/gpu-runs/mps-probe-limits.txt).
const (
	EnvMemoryLimit        = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	EnvCUDAVisibleDevices = "CUDA_VISIBLE_DEVICES"
)

// MPS client priorities (CUDA_MPS_CLIENT_PRIORITY,
// set_default_client_priority); the control accepts nothing else.
const (
	PriorityNormal      = 0
	PriorityBelowNormal = 1
)

// ClientPriority is the MPS client priority of a device of class c.
func (c Class) ClientPriority() int {
	if c == ClassBatch {
		return PriorityBelowNormal
	}
	return PriorityNormal
}

// String is the class as status and logs show it: "-" for ClassShared.
func (c Class) String() string {
	if c == ClassShared {
		return "-"
	}
	return string(c)
}

// QoS is a GPU's mps_qos: the latency slices and the reserve.
type QoS struct {
	// LatencySlices are slice numbers (from 0) for latency-bound tenants:
	// distinct, ascending and each below the GPU's number of slices, as
	// config checks a device YAML's mps_qos. They are trusted here.
	LatencySlices []int
	// ReservePercent is the share of the SMs the batch slices leave free
	// between them.
	ReservePercent int
}

// Active reports whether q makes a difference on a GPU of n slices: some
// slices are latency slices and some are not. With none, or all, every
// device is alike, as without QoS.
func (q QoS) Active(n int) bool {
	l := len(q.LatencySlices)
	return l > 0 && l < n
}

// BatchShare is the thread percentage of each of the batch slices of a
// GPU of n slices, latency of them latency slices, whose policy gives each
// device p percent: what leaves reserve percent of the SMs free when every
// batch slice is busy, (100 - reserve) / (n - latency), at least 1 (MPS
// refuses 0) and at most p (the host's thread policy stays every device's
// ceiling). SMs come in pairs (TPCs): on a 132-SM H100, 13% is 16 SMs and 12%
// 14, so one percent more or less matters (docs/benchmarks.md).
func BatchShare(p, n, latency, reserve int) int {
	batch := n - latency
	if batch < 1 {
		return p
	}
	return min(p, max(1, (100-reserve)/batch))
}

// LatencyShare is the thread percentage of each latency slice of a GPU of
// n slices whose policy gives each device p percent: the even share,
// 100/n, at least 1 and at most p.
func LatencyShare(p, n int) int {
	if n < 1 {
		return p
	}
	return min(p, max(1, 100/n))
}

// Split divides g into n virtual devices (nil when n < 1), each capped at
// memory.total / n and given p percent of the SMs, the share the host's
// thread policy gives each of n devices. With an active q (Active), the
// latency slices get LatencyShare and ClassLatency, the others BatchShare
// and ClassBatch.
func Split(g gpu.Info, n, p int, q QoS) []Device {
	devs := split(g, n, p)
	if !q.Active(n) {
		return devs
	}
	latency := LatencyShare(p, n)
	batch := BatchShare(p, n, len(q.LatencySlices), q.ReservePercent)
	for i := range devs {
		if slices.Contains(q.LatencySlices, i) {
			devs[i].Class, devs[i].ThreadPercentage = ClassLatency, latency
			continue
		}
		devs[i].Class, devs[i].ThreadPercentage = ClassBatch, batch
	}
	return devs
}

// ServerDefaults are what a GPU's MPS control daemon gives a client that
// asks for nothing: set_default_active_thread_percentage and
// set_default_client_priority.
type ServerDefaults struct {
	ThreadPercentage int
	ClientPriority   int
}

// DefaultsOf is the control daemon defaults for a GPU's devices: the
// largest share (a client can lower its share below the default, never
// raise it, so the default must be the most any device gets: with mps_qos
// usually the batch share) and below normal priority when the GPU has
// batch devices, so that a batch client that strips its environment stays
// below normal. Latency devices get their share and normal priority
// through their environment (CUDA_MPS_CLIENT_PRIORITY=0, which a client CAN
// raise itself to).
func DefaultsOf(devs []Device) ServerDefaults {
	var d ServerDefaults
	for _, dev := range devs {
		d.ThreadPercentage = max(d.ThreadPercentage, dev.ThreadPercentage)
		d.ClientPriority = max(d.ClientPriority, dev.Class.ClientPriority())
	}
	return d
}

// MostProtective is the defaults of one control daemon that serves several
// GPUs (the single pipe layout): the largest share, so no device is capped
// below its own, and below normal priority if any GPU has batch devices.
func MostProtective(ds ...ServerDefaults) ServerDefaults {
	var out ServerDefaults
	for _, d := range ds {
		out.ThreadPercentage = max(out.ThreadPercentage, d.ThreadPercentage)
		out.ClientPriority = max(out.ClientPriority, d.ClientPriority)
	}
	return out
}

// Describe says what q makes of a GPU of n slices whose policy gives each p
// percent, for check-config and logs: "latency [0] at 12%; 7 batch at 13%,
// priority 1".
func (q QoS) Describe(n, p int) string {
	if !q.Active(n) {
		if len(q.LatencySlices) > 0 {
			return "every slice latency: as without mps_qos"
		}
		return "-"
	}
	l := len(q.LatencySlices)
	return fmt.Sprintf("latency %v at %d%%; %d batch at %d%%, priority %d", q.LatencySlices, LatencyShare(p, n), n-l, BatchShare(p, n, l, q.ReservePercent), PriorityBelowNormal)
}
