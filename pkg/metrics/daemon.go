// Package metrics owns the Prometheus series of the daemon and the
// inventory: their names, labels, help texts and units. The daemon's state
// series are built at scrape time from its status (pkg/status), so a GPU or
// virtual device that is gone is simply absent from the next scrape:
// nothing is ever deleted and nothing goes stale. Counters (what happened
// since the process started) live in the collector.
//
// GPU series carry dcgm-exporter's labels spelled as dcgm-exporter spells
// them (gpu, UUID, device, modelName, pci_bus_id, Hostname), so they join
// with DCGM_FI_* series on UUID (see docs/monitoring.md).
package metrics

import (
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/version"
)

// DaemonOptions configures the daemon's collector.
type DaemonOptions struct {
	// Hostname is the Hostname label of every series (the name the host
	// registers under); empty leaves the label out.
	Hostname string
	// Status is called once per scrape for the daemon's state as it is
	// then, so a GPU or device that is gone is simply absent; it must be
	// safe to call from any goroutine.
	Status func() status.Status
	// EnforcementSteps are the steps accounting may take, EnforcementCauses
	// why; each pair has a series from the start.
	EnforcementSteps  []string
	EnforcementCauses []string
	// AccountingSources are how accounting bills a client; each has a
	// series while accounting runs.
	AccountingSources []string
}

// Daemon is the daemon's collector: the counters of what happened since
// the process started, and the state of GPUs and virtual devices read from
// the daemon's status at each scrape.
type Daemon struct {
	status  func() status.Status
	sources []string // accounting's, for its clients' series

	reconciles       *prometheus.CounterVec
	reconcileErrors  *prometheus.CounterVec
	duration         prometheus.Histogram
	reloads          *prometheus.CounterVec
	controlRestarts  prometheus.Counter
	loopStalls       prometheus.Counter
	enforcementSteps *prometheus.CounterVec
	escapeDurations  *prometheus.HistogramVec

	d daemonDescs
}

// daemonDescs are the series built from the status.
type daemonDescs struct {
	info, ready, inventory, generation, reloadOK, lastReconcile *prometheus.Desc
	gpus, devices, retiring, accounting                         *prometheus.Desc
	acctClients, acctMismatches, acctQoSEscapes                 *prometheus.Desc
	view, acctWithoutView, devWithoutView                       *prometheus.Desc
	configHeld, restartPending, loopStalled                     *prometheus.Desc
	controlLogs, newClients, polledGPUs, foreignCommands        *prometheus.Desc

	gpuInfo, gpuMemTotal, gpuMemUsed, gpuComputeMode, gpuControlUp *prometheus.Desc
	gpuServers, gpuClients, gpuEnforced, gpuHealthy                *prometheus.Desc
	gpuVirtualDevices, gpuPriority, gpuPrivilegedReachable         *prometheus.Desc

	devLimit, devThreads, devUsed, devClients, devOverCap *prometheus.Desc
	devAttached, devGuest, devHealthy, devPending         *prometheus.Desc
	devInfo, devPriority                                  *prometheus.Desc

	claims, claimInfo, claimLimit, claimThreads         *prometheus.Desc
	claimUsed, claimClients, claimOverCap, claimEscapes *prometheus.Desc

	pods, podLimit, podUsed, podClients, podOverCap *prometheus.Desc
}

// NewDaemon builds the collector; register it with NewRegistry.
func NewDaemon(o DaemonOptions) *Daemon {
	cl := constLabels(o.Hostname)
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, cl)
	}
	gpu := func(name, help string, extra ...string) *prometheus.Desc {
		return desc(name, help, append(append([]string(nil), gpuLabels...), extra...)...)
	}
	dev := func(name, help string, extra ...string) *prometheus.Desc {
		return desc(name, help, append(append([]string(nil), deviceLabels...), extra...)...)
	}
	claim := func(name, help string, extra ...string) *prometheus.Desc {
		return desc(name, help, append(append([]string(nil), claimLabels...), extra...)...)
	}
	pod := func(name, help string) *prometheus.Desc { return desc(name, help, podLabels...) }
	d := &Daemon{
		status: o.Status, sources: o.AccountingSources,
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mps_daemon_reconciles_total", Help: "Reconciles run, by result (ok or error).", ConstLabels: cl,
		}, []string{"result"}),
		reconcileErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mps_daemon_reconcile_errors_total", ConstLabels: cl,
			Help: "Failed reconciles, by what failed: config (the configuration does not fit the GPUs), gpu (NVML), mps (a control daemon), inventory.",
		}, []string{"kind"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "mps_daemon_reconcile_duration_seconds", Help: "How long one reconcile took.", ConstLabels: cl,
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mps_daemon_config_reloads_total", Help: "Configuration reloads, by result (applied, rejected, or held back until the files settle).", ConstLabels: cl,
		}, []string{"result"}),
		loopStalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mps_daemon_loop_stalls_total", Help: "Times a step of the main loop ran past its deadline (the loop stalled).", ConstLabels: cl,
		}),
		controlRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mps_daemon_control_daemon_restarts_total", Help: "MPS control daemons found dead and started again.", ConstLabels: cl,
		}),
		enforcementSteps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mps_daemon_enforcement_steps_total", ConstLabels: cl,
			Help: "Steps taken against clients, by step and cause: memory_cap (the client pushed its virtual device over its memory cap), qos_escape (its environment escapes its batch device's QoS), limit_escape (its environment lifts its MPS memory limit), no_device (a container client whose device cannot be established).",
		}, []string{"step", "cause"}),
		escapeDurations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mps_daemon_escape_duration_seconds", ConstLabels: cl,
			Help:    "How long a client's escape had lasted when the first step against it was taken, by cause and by the pass that found it: connect (checked as it connected), poll (the GPUs with clients, every fraction of a second), tick (every GPU, on the health interval). From the client's start for an escape in its environment, from the first sample that saw its device over its cap for memory.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"cause", "detected"}),
		d: daemonDescs{
			info:          desc("mps_daemon_info", "Always 1: the daemon's version and whether its GPUs and MPS are simulated.", "version", "go_version", "simulated"),
			ready:         desc("mps_daemon_ready", "1 when the last reconcile registered every planned virtual device with enforced caps."),
			inventory:     desc("mps_daemon_inventory_reachable", "1 when the last reconcile reached the inventory."),
			generation:    desc("mps_daemon_config_generation", "How many configurations this process has taken (1 at start)."),
			reloadOK:      desc("mps_daemon_config_last_reload_successful", "0 while the last edit of the configuration is rejected and the previous one runs."),
			lastReconcile: desc("mps_daemon_last_reconcile_timestamp_seconds", "When the last reconcile ended, in seconds since the epoch."),
			gpus:          desc("mps_daemon_gpus", "GPUs the configuration shares through MPS."),
			devices:       desc("mps_daemon_virtual_devices", "Virtual devices the configuration offers."),
			retiring:      desc("mps_daemon_retiring_gpus", "GPUs taken out of the configuration whose MPS daemon runs on for a held device."),
			accounting:    desc("mps_daemon_accounting_policy", "1 for the memory accounting policy in force (off, report or enforce).", "policy"),
			acctClients: desc("mps_daemon_accounting_clients",
				"MPS clients in the last accounting sample, by how they were billed: identity (their container's identity file), ancestor (an ancestor's, their own view hid it), cgroup (another process's of their cgroup, their own view hid it), environ (a host process's YUNION_MPS_VIRTUAL_DEVICE), unknown (to no device).", "source"),
			acctMismatches: desc("mps_daemon_accounting_mismatched_clients",
				"MPS clients billed by their identity file whose environment names another device or none, or whose own view hides the file."),
			acctQoSEscapes: desc("mps_daemon_accounting_qos_escapes",
				"MPS clients whose environment escapes their device: a memory limit MPS cannot take (which lifts it), or, on batch devices (mps_qos), a thread share or client priority lacking or raised."),

			view: desc("mps_daemon_view_state",
				"1 for whether containers get their device's view (CUDA and NVML answering with its cap): on, off (mps_view_library empty), missing (the library is not there: containers see the whole GPU), failed (the views could not be written).", "state"),
			acctWithoutView: desc("mps_daemon_accounting_clients_without_view",
				"MPS clients that see the whole GPU instead of their device's view (no view library in their memory map), or whose map could not be read; 0 while containers get no view."),

			configHeld:     desc("mps_daemon_config_held", "1 while a configuration change is held back until the files settle (it would remove every device, or drop the device YAML's entries)."),
			restartPending: desc("mps_daemon_config_restart_pending", "host.conf keys changed on disk that take effect at the next restart."),
			loopStalled:    desc("mps_daemon_loop_stalled", "1 while a step of the main loop runs past its deadline."),
			controlLogs: desc("mps_daemon_control_logs",
				"MPS control daemons' control.log files the accounting reads new clients from, by state: following, or not_following (its GPUs' new clients are found by polling NVML instead).", "state"),
			newClients: desc("mps_daemon_new_clients_total",
				"MPS clients seen connecting, by outcome: checked, exited (gone before they could be checked), pid_reused (their PID named a process started after they connected).", "outcome"),
			polledGPUs: desc("mps_daemon_polled_gpus", "GPUs whose MPS clients are polled now: those with clients, and those whose control.log cannot be followed."),
			foreignCommands: desc("mps_daemon_foreign_control_commands_total",
				"Commands changing something that another program sent an MPS control daemon (read in control.log), by kind: daemon (its defaults and quit: refused while its privileged socket is out of the pipe directory), server (a running server's limits, put back; its clients or its shutdown).", "kind"),

			gpuInfo:           gpu("mps_gpu_info", "Always 1: the GPU's model as NVML names it.", LabelModelName),
			gpuMemTotal:       gpu("mps_gpu_memory_total_bytes", "The GPU's memory as NVML reports it."),
			gpuMemUsed:        gpu("mps_gpu_memory_used_bytes", "The GPU's memory in use as NVML reported it at the last reconcile."),
			gpuComputeMode:    gpu("mps_gpu_compute_mode", "1 for the GPU's compute mode, 0 for the others.", "mode"),
			gpuControlUp:      gpu("mps_gpu_control_daemon_up", "1 when the GPU's MPS control daemon answered at the last reconcile."),
			gpuServers:        gpu("mps_gpu_servers", "MPS servers of the GPU, by state (ACTIVE; FAULT until the faulting client exits).", "state"),
			gpuClients:        gpu("mps_gpu_clients", "Clients connected to the GPU's MPS servers."),
			gpuEnforced:       gpu("mps_gpu_caps_enforced", "1 when MPS holds the caps (applied and read back)."),
			gpuHealthy:        gpu("mps_gpu_healthy", "1 when the caps are enforced and no MPS server is in FAULT: the GPU's devices may be handed out."),
			gpuVirtualDevices: gpu("mps_gpu_virtual_devices", "How many virtual devices the GPU is split into (virtual_number)."),
			gpuPriority:       gpu("mps_gpu_default_client_priority", "The MPS control daemon's default client priority: 1 (below normal) when the GPU has batch devices (mps_qos), else 0."),
			gpuPrivilegedReachable: gpu("mps_gpu_privileged_socket_reachable",
				"1 when the GPU's MPS control daemon's privileged socket is in its pipe directory (it could not be moved out): whoever reaches the directory can quit the daemon or change its defaults."),

			devLimit:    dev("mps_virtual_device_memory_limit_bytes", "The device's memory cap (MPS pinned device memory limit)."),
			devThreads:  dev("mps_virtual_device_thread_limit_ratio", "The device's share of the GPU's threads (MPS active thread percentage / 100)."),
			devUsed:     dev("mps_virtual_device_memory_used_bytes", "Memory its clients use, summed; absent when accounting has no sample."),
			devClients:  dev("mps_virtual_device_clients", "Client processes billed to the device; absent when accounting has no sample."),
			devOverCap:  dev("mps_virtual_device_over_cap", "1 when its clients use more than the cap; absent when accounting has no sample."),
			devAttached: dev("mps_virtual_device_attached", "1 when a guest holds the device."),
			devGuest:    dev("mps_virtual_device_guest_info", "Always 1, only while a guest holds the device: the guest's id.", "guest"),
			devHealthy:  dev("mps_virtual_device_healthy", "1 unless the inventory marks the device unhealthy (its GPU is)."),
			devPending:  dev("mps_virtual_device_pending_removal", "1 when the device left the configuration and waits for its guest to release it."),
			devInfo:     dev("mps_virtual_device_info", "Always 1: the device's id in the inventory.", "inventory_id"),
			devWithoutView: dev("mps_virtual_device_clients_without_view",
				"Client processes billed to the device that see the whole GPU instead of its view (reported, never terminated); absent when accounting has no sample or containers get no view."),
			devPriority: dev("mps_virtual_device_client_priority", "The MPS client priority the device's containers get: 0 normal, 1 below normal (a batch device of a GPU with mps_qos)."),

			claims:       desc("mps_daemon_claims", "Kubernetes claims prepared on GPUs shared by claims of any size, each with a device of its own."),
			claimInfo:    claim("mps_claim_info", "Always 1: the claim's UID and the CDI name of its device.", "claim_uid", "cdi_name"),
			claimLimit:   claim("mps_claim_memory_limit_bytes", "The claim's size: its device's memory cap."),
			claimThreads: claim("mps_claim_thread_limit_ratio", "The claim's share of its GPU's threads (MPS active thread percentage / 100)."),
			claimUsed:    claim("mps_claim_memory_used_bytes", "Memory the claim's clients use, summed; absent when accounting has no sample."),
			claimClients: claim("mps_claim_clients", "Client processes billed to the claim; absent when accounting has no sample."),
			claimOverCap: claim("mps_claim_over_cap", "1 when the claim's clients use more than its size; absent when accounting has no sample."),
			claimEscapes: claim("mps_claim_escaped_clients", "The claim's clients whose environment escapes its size or thread share; absent when accounting has no sample."),
			pods:         desc("mps_daemon_pods", "Cloudpods pods with MPS clients: one per server and GPU."),
			podLimit:     pod("mps_pod_memory_limit_bytes", "The caps of the slices the pod's server holds on the GPU, summed."),
			podUsed:      pod("mps_pod_memory_used_bytes", "Memory the pod's clients on the GPU use, summed."),
			podClients:   pod("mps_pod_clients", "The pod's client processes on the GPU."),
			podOverCap:   pod("mps_pod_over_cap", "1 when the pod's clients use more than its server's slices on the GPU."),
		},
	}
	for _, r := range []string{"ok", "error"} {
		d.reconciles.WithLabelValues(r)
	}
	for _, k := range ErrorKinds() {
		d.reconcileErrors.WithLabelValues(string(k))
	}
	for _, r := range []string{"applied", "rejected", "held"} {
		d.reloads.WithLabelValues(r)
	}
	for _, s := range o.EnforcementSteps {
		for _, c := range o.EnforcementCauses {
			d.enforcementSteps.WithLabelValues(s, c)
		}
	}
	return d
}

// ObserveEscape records how long an escape lasted when the first step
// against its client was taken. A pair of cause and pass has its series
// from its first escape on.
func (d *Daemon) ObserveEscape(cause, detected string, lasted time.Duration) {
	d.escapeDurations.WithLabelValues(cause, detected).Observe(lasted.Seconds())
}

// ObserveReconcile counts one reconcile that took took; failed is the kind
// of what failed it, empty for a reconcile that succeeded.
func (d *Daemon) ObserveReconcile(took time.Duration, failed ErrorKind) {
	d.duration.Observe(took.Seconds())
	if failed == "" {
		d.reconciles.WithLabelValues("ok").Inc()
		return
	}
	d.reconciles.WithLabelValues("error").Inc()
	d.reconcileErrors.WithLabelValues(string(failed)).Inc()
}

// ObserveReload counts a configuration reload, applied or rejected.
func (d *Daemon) ObserveReload(applied bool) {
	if applied {
		d.reloads.WithLabelValues("applied").Inc()
		return
	}
	d.reloads.WithLabelValues("rejected").Inc()
}

// ObserveReloadHeld counts a configuration change held back.
func (d *Daemon) ObserveReloadHeld() { d.reloads.WithLabelValues("held").Inc() }

// ObserveLoopStall counts a stall of the main loop.
func (d *Daemon) ObserveLoopStall() { d.loopStalls.Inc() }

// ObserveControlDaemonRestart counts a control daemon found dead and started.
func (d *Daemon) ObserveControlDaemonRestart() { d.controlRestarts.Inc() }

// ObserveEnforcementStep counts one enforcement step against a client.
func (d *Daemon) ObserveEnforcementStep(step, cause string) {
	d.enforcementSteps.WithLabelValues(step, cause).Inc()
}

func (d *Daemon) counters() []prometheus.Collector {
	return []prometheus.Collector{d.reconciles, d.reconcileErrors, d.duration, d.reloads, d.controlRestarts, d.loopStalls, d.enforcementSteps, d.escapeDurations}
}

// Describe sends every series' description: the registry checks each
// scrape against them.
func (d *Daemon) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range d.counters() {
		c.Describe(ch)
	}
	x := &d.d
	for _, desc := range []*prometheus.Desc{
		x.info, x.ready, x.inventory, x.generation, x.reloadOK, x.lastReconcile, x.gpus, x.devices, x.retiring, x.accounting,
		x.acctClients, x.acctMismatches, x.acctQoSEscapes, x.view, x.acctWithoutView, x.devWithoutView,
		x.configHeld, x.restartPending, x.loopStalled, x.controlLogs, x.newClients, x.polledGPUs, x.foreignCommands,
		x.gpuInfo, x.gpuMemTotal, x.gpuMemUsed, x.gpuComputeMode, x.gpuControlUp, x.gpuServers, x.gpuClients, x.gpuEnforced, x.gpuHealthy, x.gpuVirtualDevices, x.gpuPriority,
		x.gpuPrivilegedReachable,
		x.devLimit, x.devThreads, x.devUsed, x.devClients, x.devOverCap, x.devAttached, x.devGuest, x.devHealthy, x.devPending, x.devInfo, x.devPriority,
		x.claims, x.claimInfo, x.claimLimit, x.claimThreads, x.claimUsed, x.claimClients, x.claimOverCap, x.claimEscapes,
		x.pods, x.podLimit, x.podUsed, x.podClients, x.podOverCap,
	} {
		ch <- desc
	}
}

// Collect sends the counters, then the state of one fresh status.
func (d *Daemon) Collect(ch chan<- prometheus.Metric) {
	for _, c := range d.counters() {
		c.Collect(ch)
	}
	if d.status == nil {
		return
	}
	s := d.status()
	x := &d.d
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	gauge(x.info, 1, version.Version, runtime.Version(), strconv.FormatBool(s.Simulated))
	gauge(x.ready, boolValue(s.Ready))
	gauge(x.inventory, boolValue(s.InventoryReachable))
	gauge(x.generation, float64(s.ConfigGeneration))
	gauge(x.reloadOK, boolValue(s.ConfigError == ""))
	if !s.LastReconcile.IsZero() {
		gauge(x.lastReconcile, float64(s.LastReconcile.UnixNano())/1e9)
	}
	gauge(x.gpus, float64(len(s.GPUs)))
	gauge(x.devices, float64(s.VirtualDevices))
	gauge(x.retiring, float64(len(s.Retiring)))
	gauge(x.configHeld, boolValue(s.ConfigHeld != nil))
	gauge(x.restartPending, float64(len(s.RestartPending)))
	gauge(x.loopStalled, boolValue(s.Loop.Stalled))
	if a := s.Accounting; a != nil {
		if a.Policy != "" {
			for _, p := range withValue(accountingPolicies, a.Policy) {
				gauge(x.accounting, boolValue(p == a.Policy), p)
			}
		}
		// No clients map: no sample (policy off), and no series.
		if a.Clients != nil {
			for _, src := range d.sources {
				gauge(x.acctClients, float64(a.Clients[src]), src)
			}
			gauge(x.acctMismatches, float64(len(a.Mismatches)))
			gauge(x.acctQoSEscapes, float64(len(a.QoSEscapes)))
			gauge(x.acctWithoutView, float64(len(a.WithoutView)))
		}
		if nc := a.NewClients; nc != nil {
			following := 0
			for _, l := range nc.Logs {
				if l.Following {
					following++
				}
			}
			gauge(x.controlLogs, float64(following), "following")
			gauge(x.controlLogs, float64(len(nc.Logs)-following), "not_following")
			gauge(x.polledGPUs, float64(len(nc.PolledGPUs)))
			for _, o := range []struct {
				outcome string
				n       uint64
			}{{"checked", nc.Checked}, {"exited", nc.Exited}, {"pid_reused", nc.Reused}} {
				ch <- prometheus.MustNewConstMetric(x.newClients, prometheus.CounterValue, float64(o.n), o.outcome)
			}
			foreign := map[string]uint64{}
			for _, l := range nc.Logs {
				for k, n := range l.ForeignCommands {
					foreign[k] += n
				}
			}
			for _, k := range foreignKinds {
				ch <- prometheus.MustNewConstMetric(x.foreignCommands, prometheus.CounterValue, float64(foreign[k]), k)
			}
		}
	}
	viewOn := false
	if v := s.View; v != nil && v.State != "" {
		viewOn = v.State == status.ViewOn
		for _, st := range withValue(viewStates, v.State) {
			gauge(x.view, boolValue(st == v.State), st)
		}
	}

	byUUID := map[string]*status.GPU{}
	for i := range s.GPUs {
		g := &s.GPUs[i]
		if byUUID[g.UUID] != nil {
			continue // one series per GPU, whatever the status says
		}
		byUUID[g.UUID] = g
		d.collectGPU(gauge, *g)
	}
	seen := map[string]bool{}
	for _, dev := range s.Devices {
		if seen[dev.Name] {
			continue
		}
		seen[dev.Name] = true
		d.collectDevice(gauge, dev, byUUID[dev.GPU], viewOn)
	}
	gauge(x.claims, float64(len(s.Claims)))
	for _, c := range s.Claims {
		if seen[c.Name] {
			continue
		}
		seen[c.Name] = true
		d.collectClaim(gauge, c, byUUID[c.GPU])
	}
	gauge(x.pods, float64(len(s.Pods)))
	for _, p := range s.Pods {
		if seen[p.Name] {
			continue
		}
		seen[p.Name] = true
		l := podLabelValues(p, byUUID[p.GPU])
		gauge(x.podLimit, float64(p.MemoryLimit), l...)
		gauge(x.podUsed, float64(p.UsedBytes), l...)
		gauge(x.podClients, float64(p.Clients), l...)
		gauge(x.podOverCap, boolValue(p.OverCap), l...)
	}
}

type gaugeFunc func(desc *prometheus.Desc, v float64, labels ...string)

func (d *Daemon) collectGPU(gauge gaugeFunc, g status.GPU) {
	x := &d.d
	l := gpuLabelValues(g)
	with := func(v string) []string { return append(append([]string(nil), l...), v) }
	gauge(x.gpuInfo, 1, with(g.Model)...)
	gauge(x.gpuMemTotal, float64(g.MemoryTotal), l...)
	gauge(x.gpuMemUsed, float64(g.MemoryUsed), l...)
	if g.ComputeMode != "" {
		for _, m := range withValue(computeModes, g.ComputeMode) {
			gauge(x.gpuComputeMode, boolValue(m == g.ComputeMode), with(m)...)
		}
	}
	gauge(x.gpuControlUp, boolValue(g.ControlDaemonUp), l...)
	states := serverStates
	count := map[string]int{}
	clients := 0
	for _, srv := range g.Servers {
		states = withValue(states, srv.Status)
		count[srv.Status]++
		clients += srv.Clients
	}
	for _, st := range states {
		gauge(x.gpuServers, float64(count[st]), with(st)...)
	}
	gauge(x.gpuClients, float64(clients), l...)
	gauge(x.gpuEnforced, boolValue(g.Enforced), l...)
	gauge(x.gpuHealthy, boolValue(g.Healthy), l...)
	gauge(x.gpuPrivilegedReachable, boolValue(g.PrivilegedSocketReachable), l...)
	gauge(x.gpuVirtualDevices, float64(g.VirtualNumber), l...)
	gauge(x.gpuPriority, float64(g.ClientPriority), l...)
}

func (d *Daemon) collectDevice(gauge gaugeFunc, dev status.Device, g *status.GPU, viewOn bool) {
	x := &d.d
	l := deviceLabelValues(dev, g)
	with := func(v string) []string { return append(append([]string(nil), l...), v) }
	gauge(x.devLimit, float64(dev.MemoryLimit), l...)
	gauge(x.devThreads, float64(dev.ThreadPercentage)/100, l...)
	gauge(x.devPriority, float64(dev.ClientPriority), l...)
	if dev.Measured {
		gauge(x.devUsed, float64(dev.UsedBytes), l...)
		gauge(x.devClients, float64(dev.Clients), l...)
		gauge(x.devOverCap, boolValue(dev.OverCap), l...)
		if viewOn {
			gauge(x.devWithoutView, float64(dev.WithoutView), l...)
		}
	}
	gauge(x.devAttached, boolValue(dev.Guest != ""), l...)
	if dev.Guest != "" {
		gauge(x.devGuest, 1, with(dev.Guest)...)
	}
	gauge(x.devHealthy, boolValue(dev.Healthy), l...)
	gauge(x.devPending, boolValue(dev.PendingRemoval), l...)
	if dev.ID != "" {
		gauge(x.devInfo, 1, with(dev.ID)...)
	}
}

// collectClaim sends a claim's series, beside the virtual devices'.
func (d *Daemon) collectClaim(gauge gaugeFunc, c status.Claim, g *status.GPU) {
	x := &d.d
	l := claimLabelValues(c, g)
	gauge(x.claimInfo, 1, append(append([]string(nil), l...), c.UID, c.CDIName)...)
	gauge(x.claimLimit, float64(c.MemoryLimit), l...)
	gauge(x.claimThreads, float64(c.ThreadPercentage)/100, l...)
	if c.Measured {
		gauge(x.claimUsed, float64(c.UsedBytes), l...)
		gauge(x.claimClients, float64(c.Clients), l...)
		gauge(x.claimOverCap, boolValue(c.OverCap), l...)
		gauge(x.claimEscapes, float64(c.Escapes), l...)
	}
}

// withValue is known plus v when v is not among them (a state this code has
// not met still gets its series).
func withValue(known []string, v string) []string {
	if slices.Contains(known, v) {
		return known
	}
	return append(slices.Clone(known), v)
}
