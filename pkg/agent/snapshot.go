package agent

import (
	"yunion.io/x/mps-daemon/pkg/metrics"
	"yunion.io/x/mps-daemon/pkg/pci"
)

// snapshot is what /metrics reads at each scrape: the status as it is now,
// so that a device a resize removed is simply absent from the next scrape.
func (a *Agent) snapshot() metrics.Snapshot { return snapshotOf(a.Status()) }

// snapshotOf converts a status into pkg/metrics' terms.
func snapshotOf(st Status) metrics.Snapshot {
	s := metrics.Snapshot{
		Simulated:          st.Simulated,
		Ready:              st.Ready,
		InventoryReachable: st.InventoryReachable,
		ConfigGeneration:   st.ConfigGeneration,
		ConfigRejected:     st.ConfigError != "",
		ConfigHeld:         st.ConfigHeld != nil,
		RestartPending:     len(st.RestartPending),
		LoopStalled:        st.Loop.Stalled,
		LastReconcile:      st.LastReconcile,
		VirtualDevices:     st.VirtualDevices,
		RetiringGPUs:       len(st.Retiring),
	}
	if st.Accounting != nil {
		s.AccountingPolicy = st.Accounting.Policy
		s.AccountingClients = st.Accounting.Clients
		s.AccountingMismatches = len(st.Accounting.Mismatches)
		s.AccountingQoSEscapes = len(st.Accounting.QoSEscapes)
	}
	for _, g := range st.GPUs {
		servers := make([]metrics.Server, 0, len(g.Servers))
		for _, srv := range g.Servers {
			servers = append(servers, metrics.Server{State: srv.Status, Clients: srv.Clients})
		}
		s.GPUs = append(s.GPUs, metrics.GPU{
			Index: g.Index, UUID: g.UUID, Model: g.Model, PCIBusID: nvmlBusID(g.PCI),
			MemoryTotal: uint64(g.MemoryTotal), MemoryUsed: uint64(g.MemoryUsed), ComputeMode: g.ComputeMode,
			ControlDaemonUp: g.ControlDaemonUp, Servers: servers, VirtualDevices: g.VirtualNumber,
			CapsEnforced: g.Enforced, Healthy: g.Healthy, DefaultClientPriority: g.ClientPriority,
		})
	}
	for _, d := range st.Devices {
		s.Devices = append(s.Devices, metrics.VirtualDevice{
			Name: d.Name, GPUUUID: d.GPU, Addr: d.Addr, InventoryID: d.ID,
			CapBytes: d.CapBytes, ThreadPercentage: d.ThreadPercentage, ClientPriority: d.ClientPriority,
			Measured: d.Measured, UsedBytes: d.UsedBytes, Clients: d.Clients, OverCap: d.OverCap,
			Guest: d.Guest, Healthy: d.Healthy, PendingRemoval: d.PendingRemoval,
		})
	}
	return s
}

// nvmlBusID is the status' sysfs form of a PCI address ("0000:1a:00.0") in
// NVML's, which dcgm-exporter's pci_bus_id carries ("00000000:1A:00.0").
func nvmlBusID(sysfs string) string {
	a, err := pci.Parse(sysfs)
	if err != nil {
		return sysfs
	}
	return a.NVML()
}
