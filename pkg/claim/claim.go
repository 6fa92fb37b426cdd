// Package claim is what the host agent and the Kubernetes mode (pkg/dra,
// pkg/ledger) share about GPUs that claims of any size share (the device
// YAML's `sharing: claims`, docs/kubernetes.md): the virtual device a claim
// gets (NewDevice, at IndexBase and above), and a prepared claim's device
// as the backend answers it and the agent bills and shows it (Device).
// Their entries (identity file, view, CDI entry in a spec of their own,
// DefaultKind) are written by the one step every device's are
// (pkg/entries).
//
// A claim's device is a virtual device like a fixed slice: named
// <GPU UUID>::<index>, with its own identity file (pkg/identity) and its
// own CDI entry, built by pkg/cdi from a cdi.Device exactly as a slice's
// is, with the claim's memory and thread share as its caps. Its index is
// IndexBase + a slot of its GPU, so it never meets a fixed slice's name
// (a GPU has at most 48). The accounting bills its processes to it, by
// its identity file, against the claim's size. With the view on
// (pkg/view), its containers see the claim's size as their GPU's memory.
//
// The caps in a claim's CDI entry are environment variables, which a
// client may only lower below its control daemon's defaults (the
// project's mps-facts.md): a GPU shared by claims therefore keeps its
// daemon's defaults at the whole GPU, and what holds a tenant that strips
// its environment to the claim's size is the accounting under
// mps_accounting: enforce.
package claim

import (
	"fmt"

	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// IndexBase is the first claim device's index on a GPU: slot s is
// IndexBase + s.
const IndexBase = 1000

// DefaultKind is the CDI kind of the claims' spec, a file of its own
// beside the host's spec of fixed slices (cdi.DefaultKind): claims come
// and go with prepare and unprepare, the slices with the plan.
const DefaultKind = "yunion.io/mps-claim"

// NewDevice is the device of a claim in slot of the GPU whose device is base,
// capped at memory and threads (0: base's share, the GPU's default). It
// refuses a slot below 0, a memory of 0 or more than base's, and a thread
// share outside 1 to base's: a client cannot raise its caps above its
// control daemon's defaults, so a device promising more would be a lie.
func NewDevice(base cdi.Device, slot int, memory units.MiB, threads int) (cdi.Device, error) {
	switch {
	case slot < 0:
		return cdi.Device{}, fmt.Errorf("claim slot %d: want 0 or more", slot)
	case memory <= 0:
		return cdi.Device{}, fmt.Errorf("claim of %d MiB: want more than 0", memory)
	case memory > base.MemoryLimit:
		return cdi.Device{}, fmt.Errorf("claim of %d MiB: GPU %s offers %d MiB at most", memory, base.GPU.UUID, base.MemoryLimit)
	case threads < 0 || threads > base.ThreadPercentage:
		return cdi.Device{}, fmt.Errorf("claim of %d%% of the SMs: GPU %s offers 1 to %d%%", threads, base.GPU.UUID, base.ThreadPercentage)
	}
	d := base
	d.Index, d.MemoryLimit = IndexBase+slot, memory
	if threads > 0 {
		d.ThreadPercentage = threads
	}
	d.ID, d.IdentityFile, d.ViewDir = "", "", ""
	d.Class = vdev.ClassShared
	return d, nil
}

// IsClaim reports whether a device index is a claim's (IndexBase and
// above), and its slot.
func IsClaim(index int) (slot int, ok bool) {
	if index < IndexBase {
		return 0, false
	}
	return index - IndexBase, true
}

// IsClaimName reports whether a device name is a claim's (index
// IndexBase and above): the views the claims' entries own.
func IsClaimName(n vdev.Name) bool {
	_, i, err := vdev.ParseName(string(n))
	if err != nil {
		return false
	}
	_, ok := IsClaim(i)
	return ok
}

// Device is a claim's own device as the backend that prepared it answers
// it (backend.Answer.ClaimDevices): a virtual device (<GPU UUID>::
// <IndexBase+slot>, the claim's caps) that the agent bills and shows as it
// does a fixed slice, and the claim it is for.
type Device struct {
	vdev.Device
	// Claim is the claim's namespace/name; UID its UID.
	Claim, UID string
	// CDIName is the qualified name of its entry in the claims' CDI spec.
	CDIName string
}
