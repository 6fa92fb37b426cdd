// Package backend is the one edge from the host agent to where its virtual
// devices go: mps-inventory, a Cloudpods region or Kubernetes. Once per
// reconcile the agent hands its backend an Offer, the plan per GPU (how it
// is shared, its virtual_number, its health and its devices as the CDI
// spec makes their entries), and takes back an Answer, the backend's
// holdings per device (its id, who holds it, whether it waits to be
// removed) and the claims' own devices; each backend turns the offer into
// its own records and its records into the answer. The agent declares the
// interface (agent.DeviceBackend); Rows is the edge of the two backends
// that keep rows (pkg/inventory/client, pkg/region), the only place rows
// and the rows' sync (pkg/devsync) meet the edge; pkg/dra is Kubernetes'.
package backend

import (
	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/entries"
	"yunion.io/x/mps-daemon/pkg/units"
	"yunion.io/x/mps-daemon/pkg/vdev"
)

// Offer is the plan as one reconcile hands it to the backend.
type Offer struct {
	// Host is the name the host goes by (mps_host_name, or the kernel's).
	Host string
	// GPUs are the planned GPUs, in the plan's order.
	GPUs []GPU
	// ClaimSpec is where the entries (identity files, views, CDI entries)
	// of claims' own devices go: a backend that prepares claims writes
	// them, under claim.DefaultKind. Its view is the reconcile's, the
	// same the agent's devices get.
	ClaimSpec entries.Spec
}

// GPU is one planned GPU.
type GPU struct {
	// Sharing is how the GPU is shared: config.SharingClaims (claims of
	// any size), else its VirtualNumber fixed slices.
	Sharing config.Sharing
	// VirtualNumber is the entry's virtual_number: how many fixed slices,
	// or how many claims at once.
	VirtualNumber int
	// Healthy: its MPS serves with the caps enforced.
	Healthy bool
	// Devices are its planned devices, at least one, as the CDI spec makes
	// their entries (cdi.FromVirtual: no identity file, no inventory id).
	// A GPU shared by claims has one, the whole GPU with its control
	// daemon's defaults: each claim's own device is made from it
	// (claim.NewDevice), with the claim's caps.
	Devices []cdi.Device
}

// Answer is what the backend holds after a sync.
type Answer struct {
	// HostID is how the backend knows the host: its record's id in the
	// inventory, the node's name in Kubernetes.
	HostID string
	// Devices are the host's devices as the backend holds them: the
	// offered ones, then those out of the plan that a holder keeps
	// (pending removal), in the backend's order.
	Devices []Holding
	// ClaimDevices are the own devices of the claims prepared on GPUs
	// shared by claims (Kubernetes): the agent bills their processes and
	// shows them as it does virtual devices.
	ClaimDevices []claim.Device
	// Created, Updated and Deleted count the records the sync changed;
	// HeldOutOfPlan the records it kept out of the plan because a holder
	// has them (their devices pending removal).
	Created, Updated, Deleted, HeldOutOfPlan int
}

// Holding is one device as the backend holds it.
type Holding struct {
	Name vdev.Name
	// ID is the backend's id of the device ("" where it gives none: the
	// agent makes a non-empty one a second CDI name).
	ID string
	// Holder holds the device (a guest, a claim's UID); empty when free.
	Holder         string
	Healthy        bool
	PendingRemoval bool
	// CDIName is the device's qualified name in the host's spec, as the
	// backend records it.
	CDIName string
	// MemoryLimit and ThreadPercentage are its caps as the backend holds
	// them: what a device out of the plan keeps.
	MemoryLimit      units.MiB
	ThreadPercentage int
}
