package config

import (
	"fmt"
	"slices"

	"go.yaml.in/yaml/v3"
)

// An NVIDIA_MPS entry may name the slices of its GPU that serve
// latency-bound tenants (issue 13, docs/operations.md "Latency and batch
// slices"):
//
//	mps_qos:
//	  latency: [0]   # every other slice of the GPU is a batch slice
//	  reserve: 8     # percent of the SMs the batch slices leave free (optional)
//
// Cloudpods' own host agent reads the file into path, type and
// virtual_number and ignores this key.

// QoS reserve bounds and default, in percent of the GPU's SMs. Below 1 the
// batch slices would take every SM between them; above 50 they would keep
// less than half the GPU for the many to give it to the few. The default,
// 8, gives the batch slices 30% each at N=4 and 13% at N=8 beside a
// latency slice at 100/N: the shares that dominated plain 100/N through
// the daemon on an H100 at both N (N=4: victim p99 0.58 ms against 0.59,
// neighbours 0.91 of no cap against 0.86; N=8: 0.47 ms against 0.50, 0.90
// against 0.77; medians of three rounds, docs/benchmarks.md, issue 23).
// 4 (32% at N=4) cost the victim more than 100/N did.
const (
	DefaultQoSReservePercent = 8
	MinQoSReservePercent     = 1
	MaxQoSReservePercent     = 50
)

// maxLatencyItems bounds the latency list: a GPU has at most 48 slices, and
// a file made of aliases must not cost an error per item of a huge list.
const maxLatencyItems = 1024

// MPSQoS is an entry's mps_qos.
type MPSQoS struct {
	// Line is where mps_qos's value starts.
	Line int
	// LatencySlices are the slices for latency-bound tenants, ascending,
	// each below the entry's virtual_number; the GPU's other slices are
	// batch slices.
	LatencySlices []int
	// ReservePercent is the share of the SMs the batch slices leave free
	// between them, DefaultQoSReservePercent unless set.
	ReservePercent int

	// lines are where each of LatencySlices was written, kept by readQoS
	// for checkQoSSlices's messages and dropped once it has checked them.
	lines []int
}

// qosKeys are the keys mps_qos takes.
var qosKeys = []string{"latency", "reserve"}

// readQoS reads mps_qos into e.QoS, returning every problem, each at its
// own line. Slices are checked against virtual_number by checkQoSSlices,
// once that is read, at the lines kept here.
func readQoS(file string, e *DeviceEntry, v *yaml.Node) []error {
	field := e.Field("mps_qos")
	if v.Kind != yaml.MappingNode {
		return []error{errorf(file, v.Line, field, "want a mapping with latency (and reserve), got %s", describe(v))}
	}
	m, err := readMapping(v)
	if err != nil {
		return []error{errorf(file, v.Line, field, "%v", err)}
	}
	var errs []error
	for _, d := range m.dups {
		errs = append(errs, dupError(file, field+"."+d.key, d))
	}
	for _, p := range m.pairs {
		if p.key.Kind != yaml.ScalarNode || !slices.Contains(qosKeys, p.key.Value) {
			errs = append(errs, errorf(file, p.key.Line, field+"."+keyName(p.key), "unknown key in mps_qos (it takes latency and reserve)"))
		}
	}
	q := &MPSQoS{Line: v.Line, ReservePercent: DefaultQoSReservePercent}
	if r := m.get("reserve"); r != nil && !isNull(r) {
		n, err := intValue(r)
		switch {
		case err != nil:
			errs = append(errs, errorf(file, r.Line, field+".reserve", "%v", err))
		case n < MinQoSReservePercent || n > MaxQoSReservePercent:
			errs = append(errs, errorf(file, r.Line, field+".reserve",
				"must be from %d to %d (percent of the SMs the batch slices leave free), got %d", MinQoSReservePercent, MaxQoSReservePercent, n))
		default:
			q.ReservePercent = n
		}
	}
	l := m.get("latency")
	switch {
	case l == nil || isNull(l):
		errs = append(errs, errorf(file, v.Line, field+".latency", "missing: list the slices for latency-bound tenants, e.g. [0]"))
	case l.Kind != yaml.SequenceNode:
		errs = append(errs, errorf(file, l.Line, field+".latency", "want a list of slice numbers such as [0], got %s", describe(l)))
	case len(l.Content) > maxLatencyItems:
		errs = append(errs, errorf(file, l.Line, field+".latency", "lists %d slices; a GPU has at most 48", len(l.Content)))
	default:
		for i, item := range l.Content {
			item = deref(item)
			n, err := intValue(item)
			if err != nil {
				errs = append(errs, errorf(file, item.Line, fmt.Sprintf("%s.latency[%d]", field, i), "%v", err))
				continue
			}
			q.LatencySlices = append(q.LatencySlices, n)
			q.lines = append(q.lines, item.Line)
		}
	}
	if len(errs) > 0 {
		return errs
	}
	e.QoS = q
	return nil
}

// checkQoSSlices checks the latency slices of e against its virtual_number:
// each must exist, none twice. On success the slices are sorted.
func checkQoSSlices(file string, e *DeviceEntry) []error {
	q := e.QoS
	if q == nil {
		return nil
	}
	lines := q.lines
	q.lines = nil
	if e.VirtualNumber < 1 {
		return nil
	}
	var errs []error
	seen := map[int]bool{}
	for i, n := range q.LatencySlices {
		at := fmt.Sprintf("%s.latency[%d]", e.Field("mps_qos"), i)
		switch {
		case n < 0 || n >= e.VirtualNumber:
			errs = append(errs, errorf(file, lines[i], at, "slice %d does not exist: virtual_number %d makes slices 0 to %d", n, e.VirtualNumber, e.VirtualNumber-1))
		case seen[n]:
			errs = append(errs, errorf(file, lines[i], at, "slice %d is listed twice", n))
		}
		seen[n] = true
	}
	if len(errs) > 0 {
		e.QoS = nil
		return errs
	}
	slices.Sort(q.LatencySlices)
	return nil
}
