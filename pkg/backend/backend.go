// Package backend is the one edge from the host agent to where its virtual
// devices go: mps-inventory, a Cloudpods region or Kubernetes. Once per
// reconcile the agent hands its backend an Offer (the planned GPUs, each
// with how it is shared and its limits, and the virtual devices as the
// inventory's rows) and takes back an Answer (what the backend holds
// then); each backend turns the offer into its own records. The agent
// declares the interface (agent.DeviceBackend); Rows is the edge of the
// two backends that keep rows (pkg/inventory/client, pkg/region), pkg/dra
// is Kubernetes'.
package backend

import (
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/cdi"
	"yunion.io/x/mps-daemon/pkg/claim"
	"yunion.io/x/mps-daemon/pkg/devsync"
)

// Offer is what one reconcile hands the backend.
type Offer struct {
	// Host is the name the host goes by (mps_host_name, or the kernel's).
	Host string
	// GPUs are the planned GPUs, in the plan's order.
	GPUs []GPU
	// Rows are the planned virtual devices as the inventory's rows
	// (pkg/api, Cloudpods' names), in the plan's order; their host_id is
	// the backend's to fill.
	Rows []api.IsolatedDevice
	// Claims is where the CDI entries and identity files of claims' own
	// devices go (a backend that prepares claims writes them).
	Claims claim.Spec
}

// GPU is one planned GPU: how it is shared and its limits.
type GPU struct {
	// Device is the GPU's first planned device as the CDI spec makes its
	// entries (cdi.FromVirtual; no identity file, no inventory id): a
	// claim's own device is made from it, with the claim's caps. For a GPU
	// shared by claims it is the whole GPU, with its control daemon's
	// defaults, the most a claim can get.
	Device cdi.Device
	// Claims: the GPU is shared by claims of any size (sharing: claims);
	// otherwise it is split into VirtualNumber fixed slices.
	Claims bool
	// VirtualNumber is the entry's virtual_number: how many fixed slices,
	// or how many claims at once.
	VirtualNumber int
	// Healthy: its MPS serves with the caps enforced.
	Healthy bool
}

// Answer is what the backend holds after a sync.
type Answer struct {
	// HostID is how the backend knows the host: its record's id in the
	// inventory, the node's name in Kubernetes.
	HostID string
	// Result is the sync's: the rows the backend holds of the host's
	// devices (the offered ones, then those out of the plan that a guest
	// or a claim still holds, pending removal) and what it changed.
	devsync.Result
	// Claims are the own devices of the claims prepared on GPUs shared by
	// claims (Kubernetes): the agent bills their processes and shows them
	// as it does virtual devices.
	Claims []claim.Held
}
