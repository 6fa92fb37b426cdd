package config

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// An NVIDIA_MPS entry may say how its GPU is handed out (issue 35,
// docs/kubernetes.md "Two ways to share a GPU"):
//
//	sharing: claims   # Kubernetes: one device that claims of any size consume
//	virtual_number: 8 # ...at most 8 claims at once
//
// Without it, or with `sharing: slices`, the GPU is split into
// virtual_number fixed slices of memory.total / N, as ever. Cloudpods' own
// host agent reads the file into path, type and virtual_number and ignores
// this key.

// Sharing is an entry's `sharing`.
type Sharing string

const (
	// SharingSlices is the default: virtual_number fixed slices.
	SharingSlices Sharing = "slices"
	// SharingClaims offers the GPU whole, as one device that Kubernetes
	// claims consume in any amount of its memory (DRA consumable
	// capacity), each claim its own capped device; virtual_number is how
	// many claims it takes at once. Outside Kubernetes the GPU is one
	// device of the whole GPU.
	SharingClaims Sharing = "claims"
)

// Claims reports a GPU shared by claims of any size; "" (no key) is
// SharingSlices.
func (s Sharing) Claims() bool { return s == SharingClaims }

// readSharing reads `sharing`: exactly one of the two values, so a typo is
// an error rather than fixed slices the operator did not want.
func readSharing(e *DeviceEntry, v *yaml.Node) error {
	s, err := scalarValue(v)
	if err != nil {
		return err
	}
	switch Sharing(strings.TrimSpace(s)) {
	case SharingSlices:
		e.Sharing = SharingSlices
	case SharingClaims:
		e.Sharing = SharingClaims
	default:
		return fmt.Errorf("%q: want %s (fixed slices of memory.total / virtual_number, the default) or %s (Kubernetes claims of any size, at most virtual_number at once)",
			s, SharingSlices, SharingClaims)
	}
	return nil
}

// checkSharing refuses what a GPU shared by claims cannot have: mps_qos
// sorts fixed slices into classes, and such a GPU has none.
func checkSharing(file string, e *DeviceEntry, m *mapping) []error {
	if !e.Sharing.Claims() || e.QoS == nil {
		return nil
	}
	line := e.QoS.Line
	if v := m.get("sharing"); v != nil {
		line = v.Line
	}
	return []error{errorf(file, line, e.Field("mps_qos"),
		"mps_qos sorts a GPU's fixed slices into latency and batch classes; a GPU with sharing: %s has no fixed slices (drop one of the two)", SharingClaims)}
}
