// Package status holds what the host daemon reports of itself: the JSON of
// its /status, which `mps-daemon status` prints and pkg/metrics turns into
// series at each scrape. Like pkg/api for the REST types, it is data only
// and imports nothing of ours but the leaves pci, units and clientreport
// (what the accounting reports of MPS clients, in the very types the
// accounting works with), so the daemon, metrics and the status view read
// the same types without going through each other.
package status

import (
	"time"

	"yunion.io/x/mps-daemon/pkg/clientreport"
	"yunion.io/x/mps-daemon/pkg/pci"
	"yunion.io/x/mps-daemon/pkg/units"
)

// Status is what the daemon last did, for /readyz, /status and the logs.
type Status struct {
	// Ready is true once a reconcile registered every planned device with
	// enforced caps; it stays true until one fails.
	Ready              bool      `json:"ready"`
	Simulated          bool      `json:"simulated"`
	HostID             string    `json:"host_id,omitempty"`
	HostName           string    `json:"host_name,omitempty"`
	LastReconcile      time.Time `json:"last_reconcile"`
	LastError          string    `json:"last_error,omitempty"`
	InventoryReachable bool      `json:"inventory_reachable"`
	ConfigGeneration   int       `json:"config_generation"`
	// ConfigError is the last edit of the configuration, rejected: the
	// one before it runs.
	ConfigError    string `json:"config_error,omitempty"`
	VirtualDevices int    `json:"virtual_devices"`
	GPUs           []GPU  `json:"gpus"`
	// ConfigHeld is a configuration change held back until the files
	// settle; RestartPending the host.conf keys changed on disk that only a
	// restart applies; Loop the main loop's heartbeat.
	ConfigHeld     *Held    `json:"config_held,omitempty"`
	RestartPending []string `json:"restart_pending,omitempty"`
	Loop           Loop     `json:"loop"`
	// Retiring lists GPUs taken out of the configuration whose MPS daemon
	// still runs because a guest holds one of their devices.
	Retiring []string `json:"retiring,omitempty"`
	// Accounting is the last per-device memory accounting.
	Accounting *Accounting `json:"accounting,omitempty"`
	// CDI is the last write of the host's CDI spec.
	CDI *CDI `json:"cdi,omitempty"`
	// View says whether the CDI spec gives containers the view of their
	// device (mps_view_library).
	View *View `json:"view,omitempty"`
	// Devices are the host's virtual devices as the inventory last held
	// them, with the memory accounting last measured for each.
	Devices []Device `json:"devices,omitempty"`
	// Claims are the own devices of the Kubernetes claims prepared on GPUs
	// shared by claims of any size, as the backend last answered, with
	// the memory accounting last measured for each.
	Claims []Claim `json:"claims,omitempty"`
	// Pods are Cloudpods' own pods that have MPS clients, one per server
	// and GPU, with what the accounting last measured of them.
	Pods []Pod `json:"pods,omitempty"`
}

// Pod is a Cloudpods server's pod on one GPU (issue 45,
// docs/cloudpods.md): the processes of the server's containers, found by
// their cgroup, billed together against the slices the server holds on
// the GPU, as a virtual device's are against its cap.
type Pod struct {
	// Name is the pod's name in the accounting and in terminations
	// (<GPU UUID>::pod/<the server as the rows name it>).
	Name string `json:"name"`
	// Server is the server's id (its CRI sandbox's uid), ServerName its
	// name.
	Server     string `json:"server"`
	ServerName string `json:"server_name,omitempty"`
	GPU        string `json:"gpu"`
	GPUIndex   int    `json:"gpu_index"`
	// Slices are the slices of the GPU the server holds; MemoryLimit the
	// sum of their caps.
	Slices      int         `json:"slices"`
	MemoryLimit units.Bytes `json:"cap_bytes"`
	UsedBytes   units.Bytes `json:"used_bytes"`
	Clients     int         `json:"clients"`
	OverCap     bool        `json:"over_cap,omitempty"`
	// LastStep is the last enforcement step taken on one of its clients.
	LastStep string `json:"last_step,omitempty"`
}

// GPU is one planned GPU.
type GPU struct {
	UUID        string      `json:"uuid"`
	Index       int         `json:"index"` // NVML's, as dcgm-exporter's gpu label
	Minor       int         `json:"minor"` // N of /dev/nvidiaN
	PCI         pci.Address `json:"pci"`
	Model       string      `json:"model"`
	MemoryTotal units.Bytes `json:"memory_total_bytes"`
	MemoryUsed  units.Bytes `json:"memory_used_bytes"`
	ComputeMode string      `json:"compute_mode"`
	// ControlDaemonUp: the GPU's MPS control daemon answered.
	ControlDaemonUp bool     `json:"control_daemon_up"`
	Servers         []Server `json:"servers,omitempty"`
	VirtualNumber   int      `json:"virtual_number"`
	// MemoryLimit is each of its virtual devices' cap.
	MemoryLimit      units.MiB `json:"memory_limit_mib"`
	ThreadPercentage int       `json:"thread_percentage"`
	PipeDirectory    string    `json:"pipe_directory"`
	// ClientPriority is the control daemon's default client priority (1
	// when the GPU has batch devices); QoS the GPU's mps_qos.
	ClientPriority int  `json:"client_priority"`
	QoS            *QoS `json:"qos,omitempty"`
	// Enforced is true when MPS holds the caps (read back).
	Enforced bool `json:"enforced"`
	// Healthy is Enforced with no server in FAULT: the devices may be handed out.
	Healthy bool `json:"healthy"`
	// Reason says why a GPU with enforced caps is unhealthy (a server in
	// FAULT); it heals by itself.
	Reason string `json:"reason,omitempty"`
	// Error is a failure to get MPS going (retried with backoff).
	Error string `json:"error,omitempty"`
	// PrivilegedSocketReachable: the control daemon's privileged socket
	// (control_privileged) is in its pipe directory, where whoever reaches
	// the directory (a Cloudpods pod mounts the pipe root) can quit the
	// daemon or change its defaults; PrivilegedSocketReason says why it
	// was not moved out (docs/containers.md).
	PrivilegedSocketReachable bool   `json:"privileged_socket_reachable"`
	PrivilegedSocketReason    string `json:"privileged_socket_reason,omitempty"`
}

// Server is one MPS server of a GPU, as last seen.
type Server struct {
	PID int `json:"pid"`
	// Status is what get_server_status printed: ACTIVE or FAULT.
	Status  string `json:"status"`
	Clients int    `json:"clients"`
}

// QoS is a GPU's mps_qos.
type QoS struct {
	LatencySlices         []int `json:"latency_slices"`
	BatchThreadPercentage int   `json:"batch_thread_percentage"`
	ReservePercent        int   `json:"reserve_percent"`
}

// Device is one virtual device.
type Device struct {
	// Name is the device's vdev.Name, <GPU UUID>::<i>.
	Name     string `json:"name"`
	ID       string `json:"id"`
	Addr     string `json:"addr"`
	GPU      string `json:"gpu"`
	GPUIndex int    `json:"gpu_index"`
	// MemoryLimit is the device's cap.
	MemoryLimit      units.Bytes `json:"cap_bytes"`
	ThreadPercentage int         `json:"thread_percentage"`
	// QoSClass is latency or batch on a GPU with mps_qos, empty otherwise;
	// ClientPriority the MPS client priority its containers get.
	QoSClass       string `json:"qos_class,omitempty"`
	ClientPriority int    `json:"client_priority"`
	// UsedBytes and Clients are the last accounting sample; Measured is
	// false when there was none (accounting off, or the GPU unreadable).
	UsedBytes units.Bytes `json:"used_bytes"`
	Clients   int         `json:"clients"`
	Measured  bool        `json:"measured"`
	OverCap   bool        `json:"over_cap,omitempty"`
	// WithoutView counts its clients that see the whole GPU instead of
	// the device's view (while containers get it).
	WithoutView int `json:"clients_without_view,omitempty"`
	// LastStep is what enforcement last did on one of its clients.
	LastStep       string `json:"last_step,omitempty"`
	Guest          string `json:"guest,omitempty"`
	Healthy        bool   `json:"healthy"`
	PendingRemoval bool   `json:"pending_removal,omitempty"`
	CDIName        string `json:"cdi_name,omitempty"`
}

// Claim is a Kubernetes claim's own device on a GPU shared by claims of
// any size (docs/kubernetes.md): a virtual device whose cap is the
// claim's size, billed and enforced as a fixed slice is.
type Claim struct {
	// Device is the claim's device: its name <GPU UUID>::<1000+slot>, its
	// GPU, its size (cap_bytes) and thread share, its CDI entry's name,
	// and what the accounting last measured of its clients.
	Device
	// Claim is the claim's namespace/name, UID its UID.
	Claim string `json:"claim"`
	UID   string `json:"uid"`
	// Escapes counts its clients whose environment escapes its size or
	// thread share (each listed in Accounting.QoSEscapes); 0 when not
	// measured.
	Escapes int `json:"escapes"`
}

// Accounting is the last accounting tick: its policy, how its clients
// were billed, the MPS clients it could bill to no device and those whose
// environment disagreed with their identity. The per-device figures live
// in Status.Devices.
type Accounting struct {
	Policy string `json:"policy"`
	// Clients counts the sample's clients by how they were billed
	// (accounting's Source* values, "unknown" for none).
	Clients map[string]int `json:"clients_by_source,omitempty"`
	// Unknown, Mismatches and QoSEscapes are the accounting's own values
	// (pkg/clientreport), sorted by GPU then PID.
	Unknown    []clientreport.Unknown  `json:"unknown_processes,omitempty"`
	Mismatches []clientreport.Mismatch `json:"mismatched_processes,omitempty"`
	// QoSEscapes are clients of batch devices whose environment escapes
	// the device's QoS.
	QoSEscapes []clientreport.Escape `json:"qos_escapes,omitempty"`
	// WithoutView are clients without their device's view, or whose map
	// could not be read (while containers get the view).
	WithoutView []clientreport.WithoutView `json:"clients_without_view,omitempty"`
	// NewClients is how the accounting learns of clients as they connect.
	NewClients *NewClients `json:"new_clients,omitempty"`
	// Terminations are the last terminations begun, the oldest first (at
	// most MaxTerminations), each with how long its escape lasted.
	Terminations []Termination `json:"terminations,omitempty"`
}

// MaxTerminations is how many terminations /status keeps.
const MaxTerminations = 32

// NewClients is how the accounting learns of MPS clients as they connect:
// each control daemon's control.log followed, and NVML polled on the GPUs
// that have clients (docs/containers.md, "What is caught when").
type NewClients struct {
	// Logs are the control.log files followed, one per control daemon.
	Logs []ClientLog `json:"logs"`
	// PollIntervalSeconds is how often a GPU with clients is polled;
	// PolledGPUs those polled now: GPUs with clients, and GPUs whose log
	// cannot be followed (their new clients are found by the poll).
	PollIntervalSeconds float64  `json:"poll_interval_seconds"`
	PolledGPUs          []string `json:"polled_gpus,omitempty"`
	// Checked counts the clients checked as they connected; Exited those
	// gone before they could be; Reused the lines whose PID named a
	// process started after the line.
	Checked uint64 `json:"checked"`
	Exited  uint64 `json:"exited_before_check"`
	Reused  uint64 `json:"pid_reused"`
}

// ClientLog is one control daemon's control.log, followed.
type ClientLog struct {
	Path string   `json:"path"`
	GPUs []string `json:"gpus"`
	// Following: read as it grows; when not, Error says why (and its
	// GPUs are polled).
	Following bool   `json:"following"`
	Error     string `json:"error,omitempty"`
	// Clients counts its NEW CLIENT lines read, Active the ACTIVE lines
	// of the server.log beside it (a client's context up: the moment a
	// client caught as it connected is killed); Trouble is the last
	// trouble met in either (a malformed line, a line too long, a
	// truncation).
	Clients   uint64 `json:"clients"`
	Active    uint64 `json:"active_clients"`
	Malformed uint64 `json:"malformed_lines,omitempty"`
	LongLines uint64 `json:"long_lines,omitempty"`
	Restarts  uint64 `json:"restarts,omitempty"`
	Trouble   string `json:"trouble,omitempty"`
	// ForeignCommands counts, by kind (daemon: the control daemon's
	// settings and quit; server: a running server's limits and clients),
	// the commands changing something that this daemon did not send;
	// LastForeign is the last of them, with its time.
	ForeignCommands map[string]uint64 `json:"foreign_commands,omitempty"`
	LastForeign     string            `json:"last_foreign_command,omitempty"`
}

// Termination is a client the accounting began to terminate: its first
// step, and how long its escape had lasted then.
type Termination struct {
	PID    int    `json:"pid"`
	GPU    string `json:"gpu"`
	Device string `json:"device,omitempty"`
	// Server is the Cloudpods server of a pod's client (Device is then
	// the pod's name).
	Server string `json:"server,omitempty"`
	Cause  string `json:"cause"`
	// Step is the first step (terminate_client, sigkill, sigterm);
	// Detected the pass that found it (connect, poll, tick).
	Step     string    `json:"step"`
	Detected string    `json:"detected"`
	At       time.Time `json:"at"`
	// EscapeFrom is client_start (an escape in its environment: from the
	// process's start) or cap_crossed (its device over its cap: from the
	// first sample that saw it over, EscapeSeconds, or at most from the
	// last that saw it under, EscapeSecondsAtMost).
	EscapeFrom          string  `json:"escape_from,omitempty"`
	EscapeSeconds       float64 `json:"escape_seconds"`
	EscapeSecondsAtMost float64 `json:"escape_seconds_at_most,omitempty"`
}

// View states.
const (
	// ViewOn: every device's CDI entry gives its containers the view.
	ViewOn = "on"
	// ViewOff: mps_view_library is empty.
	ViewOff = "off"
	// ViewMissing: the library is not where mps_view_library says; the
	// devices are served without the view (containers see the whole GPU).
	ViewMissing = "missing"
	// ViewFailed: the views could not be written; the devices are served
	// without the view until they can.
	ViewFailed = "failed"
)

// View is whether the containers of the host's devices get their device's
// view: CUDA and NVML answering with its cap as the GPU's memory.
type View struct {
	// Library is mps_view_library ("" when off).
	Library string `json:"library,omitempty"`
	// State is ViewOn, ViewOff, ViewMissing or ViewFailed.
	State string `json:"state"`
	// Reason says why it is not on.
	Reason string `json:"reason,omitempty"`
	// Devices counts the devices (and claims) whose view is kept.
	Devices int `json:"devices"`
}

// CDI is the last write of the host's CDI spec.
type CDI struct {
	Path    string `json:"path,omitempty"`
	Devices int    `json:"devices"`
	Error   string `json:"error,omitempty"`
}

// Held is a configuration change held back until the files settle.
type Held struct {
	// Reason says what the change would do.
	Reason string `json:"reason"`
	// Since is when the files first held this change.
	Since time.Time `json:"since"`
	// ApplyAt is when it is applied if the files stay unchanged.
	ApplyAt time.Time `json:"apply_at"`
}

// Loop is the main loop's heartbeat.
type Loop struct {
	// Step is what the loop is doing now; empty while it waits.
	Step string `json:"step,omitempty"`
	// Since is when it began Step.
	Since *time.Time `json:"since,omitempty"`
	// Stalled is true when Step ran past its deadline and the grace.
	Stalled bool `json:"stalled,omitempty"`
}

// StallMessage says how the loop is stalled at now, "" when it is not.
func (l Loop) StallMessage(now time.Time) string {
	if !l.Stalled {
		return ""
	}
	msg := "main loop stalled in " + l.Step
	if l.Since != nil {
		msg += " for " + now.Sub(*l.Since).Round(time.Second).String()
	}
	return msg
}
