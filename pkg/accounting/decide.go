package accounting

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
)

// Overage is a device over its cap.
type Overage struct {
	Device    string
	GPU       gpu.UUID
	UsedBytes uint64
	CapBytes  uint64
	PIDs      []int
}

// Causes of an Action.
const (
	// CauseMemory: its device is over its memory cap and it grew most.
	CauseMemory = "memory_cap"
	// CauseQoS: its environment escapes its batch device's QoS (qos.go).
	CauseQoS = "qos_escape"
	// CauseLimit: its environment lifts its MPS memory limit (limit.go).
	CauseLimit = "limit_escape"
	// CauseNoDevice: it is in a container whose device cannot be
	// established (UnknownProcess.Hidden), so it is treated as over every
	// cap it could be under.
	CauseNoDevice = "no_device"
)

// Causes lists every cause, for series that must exist before the first.
func Causes() []string { return []string{CauseMemory, CauseQoS, CauseLimit, CauseNoDevice} }

// Action is one client to terminate.
type Action struct {
	PID    int
	Device string
	GPU    gpu.UUID
	// Server is the Cloudpods server of a pod's client (Device is then
	// the pod's name, PodName); "" for a virtual device's.
	Server string
	// Cause is CauseMemory, CauseQoS, CauseLimit or CauseNoDevice (then
	// Device is "").
	Cause string
	// UsedBytes is the client's own usage; DeviceUsedBytes its device's
	// before any termination; CapBytes the device's cap.
	UsedBytes       uint64
	DeviceUsedBytes uint64
	CapBytes        uint64
	// StartTicks identifies the process (a reused PID is another one).
	StartTicks uint64
	Reason     string
	// KillFirst: SIGKILL at once, no terminate_client and no grace
	// first. For a client caught as it connects (issue 39): it has done
	// nothing on the GPU yet, its escape could take the GPU's memory
	// within milliseconds, terminate_client cannot reach a client still
	// waiting for its server, and a SIGTERM can be caught.
	KillFirst bool
	// AwaitActive: the SIGKILL waits for the client's context to be up
	// (its MPS server's ACTIVE line, Enforcer.Activated, or a pass's
	// sample listing it on the GPU), or ActiveWait.
	// A client caught as it connects is killed no sooner: one killed
	// between connecting to its server and sending it its credentials
	// leaves the server taking no new client and every control command
	// that asks it hanging, until the server is killed
	// (docs/gpu-runs/probe-wedge-2026-11-29.txt). Its context comes up
	// about 100 ms before it can allocate.
	AwaitActive bool
	// Grace, when set, is how long the client gets after each step
	// instead of the Enforcer's: PollGrace for a device over its cap found
	// by the poll.
	Grace time.Duration
	// Detected is the pass that found it: DetectedConnect, DetectedPoll
	// or DetectedTick.
	Detected string
	// Escape says since when the client escaped (EscapeTime).
	Escape EscapeTime
}

// Passes of the accounting that find what is to be terminated.
const (
	// DetectedConnect: the client was checked as it connected (its
	// control daemon's NEW CLIENT line), before it allocated.
	DetectedConnect = "connect"
	// DetectedPoll: a pass over the GPUs that have clients, every
	// fraction of a second while they have any.
	DetectedPoll = "poll"
	// DetectedTick: the pass over every GPU on the health tick.
	DetectedTick = "tick"
)

// Detections lists every pass, for series that must exist before the
// first.
func Detections() []string { return []string{DetectedConnect, DetectedPoll, DetectedTick} }

// Where an escape's time is counted from.
const (
	// EscapeFromStart: the client's start (an escape in its initial
	// environment, or a client in a container whose device cannot be
	// established: it escaped from its first instant).
	EscapeFromStart = "client_start"
	// EscapeFromCap: its device crossing its cap, as the samples saw it.
	EscapeFromCap = "cap_crossed"
)

// EscapeTime is since when a client escaped, as far as is known.
type EscapeTime struct {
	// From is EscapeFromStart or EscapeFromCap ("" unknown).
	From string
	// Since is the client's start, or the first sample that saw its
	// device over its cap; Bound, for a cap, the last sample that saw it
	// under (zero: none did). The escape began in (Bound, Since].
	Since, Bound time.Time
}

// Lasted is how long the escape had lasted at t: at least, and at most
// (0 when no sample bounds it); known is false without a Since.
func (e EscapeTime) Lasted(t time.Time) (least, most time.Duration, known bool) {
	if e.Since.IsZero() {
		return 0, 0, false
	}
	least = max(t.Sub(e.Since), 0)
	if !e.Bound.IsZero() {
		most = max(t.Sub(e.Bound), 0)
	}
	return least, most, true
}

// Decision is what Decide found: the devices over their cap (under report
// and enforce) and, under enforce, who to terminate.
type Decision struct {
	Over    []Overage
	Actions []Action
}

// History is what Decide needs of earlier ticks.
type History struct {
	// Previous is the last sample; nil on the first, when nobody's growth is
	// known.
	Previous *Usage
	// Terminating are PIDs already being terminated (Enforcer.Terminating):
	// their memory counts as on its way out, and they are not picked again.
	Terminating map[int]bool
}

// Decide finds the devices whose clients together use more than the cap
// (exactly at the cap is fine) and, under enforce, picks the clients to
// terminate: the one whose usage grew most since the previous sample (a
// client new since then grew from zero; with no previous sample nobody's
// growth is known), ties going to the newest process; then, if the device
// is still over once that one's memory is gone, the next, and so on. So a
// device is brought back under its cap by as few terminations as the rule
// allows, devices under their cap are never touched, and unknown processes
// (Usage.Unknown) are never picked. A device without a cap (missing or 0)
// is not judged.
//
// A lone client cannot pass the cap on its own while MPS's per-client cap
// equals the device's: MPS holds NVML's figure for the client to its limit
// (docs/gpu-runs/mps-probe2.txt: 20368 MiB used under a 20389 MiB limit,
// 20 MiB free). It can after a resize lowered the device's cap, as running
// clients keep the cap they started with.
func Decide(u Usage, caps map[string]uint64, p config.AccountingPolicy, h History) Decision {
	var d Decision
	if p != config.AccountingReport && p != config.AccountingEnforce {
		return d
	}
	prev := map[int]Client{}
	if h.Previous != nil {
		for _, du := range h.Previous.PerDevice {
			for _, c := range du.Clients {
				prev[c.PID] = c
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(u.PerDevice)) {
		du := u.PerDevice[name]
		capBytes := caps[name]
		if capBytes == 0 || du.UsedBytes <= capBytes {
			continue
		}
		d.Over = append(d.Over, Overage{Device: name, GPU: du.GPU, UsedBytes: du.UsedBytes, CapBytes: capBytes, PIDs: du.PIDs})
		if p != config.AccountingEnforce {
			continue
		}
		used := du.UsedBytes
		var candidates []candidate
		for _, c := range du.Clients {
			if h.Terminating[c.PID] {
				used -= c.UsedBytes
				continue
			}
			cand := candidate{Client: c}
			if h.Previous != nil {
				cand.known = true
				cand.growth = int64(c.UsedBytes)
				if old, ok := prev[c.PID]; ok && old.StartTicks == c.StartTicks {
					cand.growth -= int64(old.UsedBytes)
				}
			}
			candidates = append(candidates, cand)
		}
		// Most growth first, then the newest, then the larger PID so the
		// order is total.
		sort.Slice(candidates, func(i, j int) bool {
			a, b := candidates[i], candidates[j]
			return cmp.Or(cmp.Compare(b.growth, a.growth), cmp.Compare(b.StartTicks, a.StartTicks), cmp.Compare(b.PID, a.PID)) < 0
		})
		for _, c := range candidates {
			if used <= capBytes {
				break
			}
			d.Actions = append(d.Actions, Action{
				PID: c.PID, Device: name, GPU: du.GPU, Server: c.Pod.Server, Cause: CauseMemory,
				UsedBytes: c.UsedBytes, DeviceUsedBytes: du.UsedBytes, CapBytes: capBytes,
				StartTicks: c.StartTicks, Reason: c.reason(used, capBytes),
			})
			used -= c.UsedBytes
		}
	}
	return d
}

type candidate struct {
	Client
	known  bool // growth is known (there was a previous sample)
	growth int64
}

func (c candidate) reason(used, capBytes uint64) string {
	over := fmt.Sprintf("device at %d MiB, over its %d MiB cap", used>>20, capBytes>>20)
	if !c.known {
		return over + "; no earlier sample: newest client"
	}
	return fmt.Sprintf("%s; grew %+d MiB since the last sample, the most (ties: newest)", over, c.growth/(1<<20))
}

// DecideHidden picks, under enforce, every hidden client of u (a container
// process whose device cannot be established) for termination, whatever
// its memory: it could be under any cap of its GPU, so it is taken to be
// over every one (issue 23). None already being terminated, none picked
// already. Host processes are never hidden. Under report it picks nobody.
func DecideHidden(u Usage, p config.AccountingPolicy, h History, picked []Action) []Action {
	if p != config.AccountingEnforce {
		return nil
	}
	taken := map[int]bool{}
	for _, a := range picked {
		taken[a.PID] = true
	}
	var out []Action
	for _, un := range u.Unknown {
		if !un.Hidden || h.Terminating[un.PID] || taken[un.PID] {
			continue
		}
		taken[un.PID] = true
		out = append(out, Action{PID: un.PID, GPU: un.GPU, UsedBytes: uint64(un.UsedBytes), StartTicks: un.StartTicks,
			Cause: CauseNoDevice, Reason: "no device can be established for it: " + un.Reason})
	}
	return out
}
