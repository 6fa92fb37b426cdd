package config

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ThreadPolicy decides the active thread percentage (the share of the GPU's
// SMs an MPS client may use) of each of a GPU's N virtual devices. It is set
// per host with host.conf's mps_thread_percentage (HostConf.Threads):
//
//	auto    the measured default (AutoThreadPolicy; docs/benchmarks.md)
//	even    100/N, what Cloudpods' host agent writes: the shares add up to
//	        the whole GPU
//	none    100: no thread cap, MPS schedules clients freely
//	K/N     K/N percent, at most 100 (e.g. 200/N lets each device use twice
//	        its even share while others are idle)
//	P       a fixed P percent (1 to 100) whatever N
//
// The memory cap is memory.total/N under every policy.
type ThreadPolicy struct {
	// Numerator is K of K/N; 0 for a fixed policy.
	Numerator int
	// Fixed is P for a fixed policy.
	Fixed int
	name  string
}

// AutoThreadPolicy is what auto means: the policy chosen from measurements
// on an H200 (docs/benchmarks.md, "Thread policy").
const AutoThreadPolicy = "400/N"

// ParseThreadPolicy reads a policy as host.conf spells it; the empty string
// is auto.
func ParseThreadPolicy(s string) (ThreadPolicy, error) {
	orig := s
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "", "auto":
		p, err := ParseThreadPolicy(AutoThreadPolicy)
		p.name = "auto (" + AutoThreadPolicy + ")"
		return p, err
	case "even":
		return ThreadPolicy{Numerator: 100, name: "even (100/N)"}, nil
	case "none":
		return ThreadPolicy{Fixed: 100, name: "none (100)"}, nil
	}
	if k, ok := strings.CutSuffix(strings.ToUpper(s), "/N"); ok {
		n, err := strconv.Atoi(strings.TrimSpace(k))
		if err != nil || n < 1 || n > 10000 {
			return ThreadPolicy{}, fmt.Errorf("%q: want K/N with K from 1 to 10000", orig)
		}
		return ThreadPolicy{Numerator: n, name: fmt.Sprintf("%d/N", n)}, nil
	}
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 100 {
		return ThreadPolicy{}, fmt.Errorf("%q: want auto, even, none, K/N or a percentage from 1 to 100", orig)
	}
	return ThreadPolicy{Fixed: p, name: strconv.Itoa(p)}, nil
}

// Percentage is the share of each of n devices: at least 1, at most 100.
func (p ThreadPolicy) Percentage(n int) int {
	if n < 1 {
		return 0
	}
	v := p.Fixed
	if p.Numerator > 0 {
		v = p.Numerator / n
	}
	return min(max(v, 1), 100)
}

// String names the policy.
func (p ThreadPolicy) String() string {
	if p.name != "" {
		return p.name
	}
	if p.Numerator > 0 {
		return fmt.Sprintf("%d/N", p.Numerator)
	}
	return strconv.Itoa(p.Fixed)
}

// Thread policies a host gets without mps_thread_percentage: auto, or even
// under a Cloudpods region (checkCloudpods).
var (
	AutoThreads = mustThreadPolicy("auto")
	EvenThreads = mustThreadPolicy("even")
)

func mustThreadPolicy(s string) ThreadPolicy {
	p, err := ParseThreadPolicy(s)
	if err != nil {
		panic(err)
	}
	return p
}

// threadPolicy reads mps_thread_percentage.
func threadPolicy(v *yaml.Node) (ThreadPolicy, error) {
	s, err := scalarValue(v)
	if err != nil {
		return ThreadPolicy{}, err
	}
	return ParseThreadPolicy(s)
}
