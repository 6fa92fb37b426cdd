package accounting

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"yunion.io/x/mps-daemon/pkg/clientreport"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// QoS escapes (issue 13). A batch device of a GPU with mps_qos gives its
// containers a thread share below the GPU's and below normal priority, in
// their environment (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE,
// CUDA_MPS_CLIENT_PRIORITY). MPS caps every client at the control daemon's
// default share, the GPU's largest, and lets any client choose its own
// priority: so a batch client that starts without those variables, or with
// larger ones, takes more than its device was given. Its initial
// environment (/proc/<pid>/environ, read for the device name anyway) shows
// it: such a client is an escape, reported and, under enforce, terminated
// like a client over its memory cap. What this cannot see: a process that
// changes its environment in its own memory (setenv) before CUDA starts;
// /proc shows the environment it was started with (docs/containers.md).

// ParseQoSEnviron finds the QoS variables in the contents of
// /proc/<pid>/environ (NUL-separated NAME=value entries).
func ParseQoSEnviron(environ []byte) clientreport.QoSEnv {
	v, err := scanEnviron(bytes.NewReader(environ))
	if err != nil {
		return clientreport.QoSEnv{Unreadable: err.Error()}
	}
	return v.qosOf()
}

// qosOf is what v says of the client's QoS.
func (v envVars) qosOf() clientreport.QoSEnv {
	value := func(vals []string) clientreport.EnvValue {
		if len(vals) == 0 {
			return clientreport.EnvValue{}
		}
		return clientreport.EnvValue{Value: envDisplay(vals[len(vals)-1]), Set: true, Twice: len(vals) > 1}
	}
	return clientreport.QoSEnv{ThreadPercentage: value(v.thread), ClientPriority: value(v.priority), MemoryLimit: value(v.limit)}
}

// DeviceQoS is what a batch device's clients must keep to.
type DeviceQoS struct {
	// ThreadPercentage and ClientPriority are the device's.
	ThreadPercentage int
	ClientPriority   int
	// Server is its GPU's control daemon's defaults: what a client whose
	// environment lacks a variable gets.
	Server vdev.ServerDefaults
}

// BatchQoS lists the batch devices of one GPU's devs, whose control daemon
// holds server; other devices are not checked (a latency or shared device
// has the GPU's share already, and a client that lowers its own priority
// harms nobody else).
func BatchQoS(devs []vdev.Device, server vdev.ServerDefaults) map[string]DeviceQoS {
	out := map[string]DeviceQoS{}
	for _, d := range devs {
		if d.Class != vdev.ClassBatch {
			continue
		}
		out[d.Name().String()] = DeviceQoS{ThreadPercentage: d.ThreadPercentage, ClientPriority: d.Class.ClientPriority(), Server: server}
	}
	return out
}

// CheckQoS says how a client with environment env escapes q, or "" when it
// does not: its share is what its variable asks, at most the server's
// default, or the server's default when unset; its priority is its
// variable's, or the server's default when unset. A value CUDA might not
// take as asked (not a number, not 0 or 1, set twice) counts as an escape:
// what MPS then gives it is not known.
func CheckQoS(env clientreport.QoSEnv, q DeviceQoS) string {
	if env.Unreadable != "" {
		return "its environment cannot be read (" + env.Unreadable + ")"
	}
	var why []string
	t, tn := env.ThreadPercentage, vdev.EnvThreadPercentage
	switch {
	case t.Twice:
		why = append(why, tn+" is set twice")
	case !t.Set:
		if q.Server.ThreadPercentage > q.ThreadPercentage {
			why = append(why, fmt.Sprintf("no %s: it gets the server's %d%%, its device's share is %d%%", tn, q.Server.ThreadPercentage, q.ThreadPercentage))
		}
	default:
		v, err := strconv.ParseFloat(strings.TrimSpace(t.Value), 64)
		switch {
		case err != nil || math.IsNaN(v) || v <= 0:
			why = append(why, fmt.Sprintf("%s=%q is not a percentage", tn, t.Value))
		case math.Min(v, float64(q.Server.ThreadPercentage)) > float64(q.ThreadPercentage):
			why = append(why, fmt.Sprintf("%s=%s is above its device's share, %d%%", tn, t.Value, q.ThreadPercentage))
		}
	}
	p, pn := env.ClientPriority, vdev.EnvClientPriority
	switch {
	case p.Twice:
		why = append(why, pn+" is set twice")
	case !p.Set:
		if q.Server.ClientPriority < q.ClientPriority {
			why = append(why, fmt.Sprintf("no %s: it gets the server's priority %d, its device's is %d", pn, q.Server.ClientPriority, q.ClientPriority))
		}
	default:
		switch v := strings.TrimSpace(p.Value); {
		case v != "0" && v != "1":
			why = append(why, fmt.Sprintf("%s=%q is not 0 or 1", pn, p.Value))
		case int(v[0]-'0') < q.ClientPriority:
			why = append(why, fmt.Sprintf("%s=%s raises it above its device's priority %d", pn, v, q.ClientPriority))
		}
	}
	return strings.Join(why, "; ")
}

// Escape is a client whose environment (Client.Env) escapes its batch
// device's QoS or its device's memory limit; Reason says how. The embedded
// clientreport.Escape is what /status shows.
type Escape struct {
	clientreport.Escape
	// StartTicks identifies the process (see Client.StartTicks): the one
	// to terminate is this one, not a later holder of its PID.
	StartTicks uint64
	// Limit: it escapes the memory limit (CheckMemoryLimit), whatever
	// else; its termination's cause is CauseLimit.
	Limit bool
}

func (e Escape) gpuPID() (gpu.UUID, int) { return e.GPU, e.PID }

// Escapes finds the clients of u whose environment escapes their device's
// memory limit (every device of caps, its GPU's server limit taken from
// servers where known: SetServerMemoryLimits), or the QoS of their device
// when it is a batch device of qos; sorted by GPU then PID.
func Escapes(u Usage, caps map[string]uint64, qos map[string]DeviceQoS, servers map[gpu.UUID]units.MiB) []Escape {
	var out []Escape
	for _, name := range slices.Sorted(maps.Keys(u.PerDevice)) {
		q, batch := qos[name]
		d := u.PerDevice[name]
		l := DeviceLimit{GPU: d.GPU, Cap: units.Bytes(caps[name]).MiB()}
		if _, _, pod := ParsePodName(name); !pod {
			// A pod's client sees every GPU of the single layout's daemon,
			// each at its own ordinal, whose limit is that GPU's own slice
			// cap (agent/layout.go): within its pod's cap whatever its
			// server holds. Only a list MPS cannot take escapes it.
			l.Server, l.ServerKnown = servers[d.GPU]
		}
		for _, c := range d.Clients {
			var why []string
			limit := CheckMemoryLimit(c.Env, l)
			if limit != "" {
				why = append(why, limit)
			}
			if batch {
				if qosWhy := CheckQoS(c.Env, q); qosWhy != "" && qosWhy != limit {
					why = append(why, qosWhy)
				}
			}
			if len(why) > 0 {
				out = append(out, Escape{Escape: clientreport.Escape{PID: c.PID, GPU: d.GPU, UsedBytes: units.Bytes(c.UsedBytes),
					Device: name, Source: c.Source, Environment: c.Env, Server: c.Pod.Server, Reason: strings.Join(why, "; ")}, StartTicks: c.StartTicks, Limit: limit != ""})
			}
		}
	}
	byGPUThenPID(out)
	return out
}

// DecideEscapes picks, under enforce, every escaping client for termination
// (none already being terminated, none picked already in picked); the
// device's memory is irrelevant here. Under report it picks nobody.
func DecideEscapes(escapes []Escape, u Usage, caps map[string]uint64, p config.AccountingPolicy, h History, picked []Action) []Action {
	if p != config.AccountingEnforce {
		return nil
	}
	taken := map[int]bool{}
	for _, a := range picked {
		taken[a.PID] = true
	}
	var out []Action
	for _, e := range escapes {
		if h.Terminating[e.PID] || taken[e.PID] {
			continue
		}
		taken[e.PID] = true
		cause, what := CauseQoS, "escapes its device's QoS: "
		if e.Limit {
			cause, what = CauseLimit, "escapes its device's memory limit: "
		}
		out = append(out, Action{PID: e.PID, Device: e.Device, GPU: e.GPU, Server: e.Server, UsedBytes: uint64(e.UsedBytes),
			DeviceUsedBytes: u.PerDevice[e.Device].UsedBytes, CapBytes: caps[e.Device], StartTicks: e.StartTicks,
			Cause: cause, Reason: what + e.Reason})
	}
	return out
}
