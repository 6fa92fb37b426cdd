// Package metrics owns the Prometheus series of the daemon and the
// inventory: their names, labels, help texts and units. The daemon's state
// series are built at scrape time from a Snapshot the daemon hands over, so
// a GPU or virtual device that is gone is simply absent from the next
// scrape: nothing is ever deleted and nothing goes stale. Counters (what
// happened since the process started) live in the collector.
//
// GPU series carry dcgm-exporter's labels spelled as dcgm-exporter spells
// them (gpu, UUID, device, modelName, pci_bus_id, Hostname), so they join
// with DCGM_FI_* series on UUID (see docs/monitoring.md).
package metrics

import "time"

// Snapshot is what the daemon knows at one scrape. The daemon converts its
// own status into it; this package imports nothing of the daemon's.
type Snapshot struct {
	Simulated          bool
	Ready              bool
	InventoryReachable bool
	ConfigGeneration   int
	// ConfigRejected is true while the last edit of the configuration was
	// rejected and the previous one runs.
	ConfigRejected bool
	// ConfigHeld is true while a configuration change is held back until
	// the files settle.
	ConfigHeld bool
	// RestartPending counts host.conf keys changed on disk that take effect
	// at the next restart.
	RestartPending int
	// LoopStalled is true while a step of the main loop runs past its
	// deadline.
	LoopStalled bool
	// LastReconcile is zero before the first reconcile ended.
	LastReconcile time.Time
	// VirtualDevices is how many devices the plan offers.
	VirtualDevices int
	// RetiringGPUs are GPUs taken out of the configuration whose MPS daemon
	// still runs for a held device.
	RetiringGPUs int
	// AccountingPolicy is off, report or enforce; empty before the first
	// accounting tick.
	AccountingPolicy string
	// AccountingClients counts the MPS clients of the last accounting
	// sample by how they were billed (AccountingSources); nil when there
	// was none (policy off), and then no series is exported.
	AccountingClients map[string]int
	// AccountingMismatches counts the clients billed by their identity file
	// whose environment names another device or none, or whose own view
	// hides the file.
	AccountingMismatches int
	// AccountingQoSEscapes counts the clients of batch devices whose
	// environment escapes the device's QoS.
	AccountingQoSEscapes int
	GPUs                 []GPU
	Devices              []VirtualDevice
}

// GPU is one physical GPU the configuration shares through MPS.
type GPU struct {
	// Index is NVML's index (dcgm-exporter's gpu label).
	Index int
	UUID  string
	// Model is NVML's name, e.g. "NVIDIA H100 80GB HBM3".
	Model string
	// PCIBusID is NVML's form, "00000000:1A:00.0".
	PCIBusID    string
	MemoryTotal uint64
	MemoryUsed  uint64
	// ComputeMode is nvidia-smi's spelling, e.g. "Exclusive_Process".
	ComputeMode     string
	ControlDaemonUp bool
	Servers         []Server
	// VirtualDevices is the configured N.
	VirtualDevices int
	CapsEnforced   bool
	Healthy        bool
	// DefaultClientPriority is the control daemon's default MPS client
	// priority: 1 when the GPU has batch devices (mps_qos), else 0.
	DefaultClientPriority int
}

// Server is one MPS server of a GPU.
type Server struct {
	// State is what get_server_status printed: ACTIVE or FAULT.
	State   string
	Clients int
}

// VirtualDevice is one virtual device of the host as the inventory holds it.
type VirtualDevice struct {
	// Name is <GPU UUID>::<i>, the device's CDI name.
	Name        string
	GPUUUID     string
	Addr        string
	InventoryID string
	CapBytes    uint64
	// ThreadPercentage is MPS's active thread percentage (0 to 100).
	ThreadPercentage int
	// ClientPriority is the MPS client priority its containers get: 0
	// normal, 1 below normal (a batch device).
	ClientPriority int
	// Measured is false when accounting has no sample for the device
	// (accounting off, or the GPU's processes unreadable): UsedBytes,
	// Clients and OverCap are then not exported at all rather than as 0.
	Measured  bool
	UsedBytes uint64
	Clients   int
	OverCap   bool
	// Guest is the guest holding the device; empty when free.
	Guest          string
	Healthy        bool
	PendingRemoval bool
}
