package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"yunion.io/x/mps-daemon/pkg/status"
)

// Label names. The GPU labels are dcgm-exporter's, spelled as it spells
// them (its default UUID label is upper case, Hostname capitalised), so a
// series of ours and a DCGM_FI_* series of the same GPU carry the same
// values and join on UUID, or on gpu and Hostname. dcgm-exporter's
// modelName is the one exception: promtool check metrics refuses camelCase
// label names, so the model is model_name (dcgm-exporter's own spelling on
// its NVLink series), and only on mps_gpu_info.
const (
	LabelGPU       = "gpu"        // NVML index, "0"
	LabelUUID      = "UUID"       // "GPU-5d4c..."
	LabelDevice    = "device"     // "nvidia0": dcgm-exporter's "nvidia" + index
	LabelPCIBusID  = "pci_bus_id" // NVML's form, "00000000:1A:00.0"
	LabelHostname  = "Hostname"   // on every series of the daemon
	LabelModelName = "model_name" // NVML's name, "NVIDIA H100 80GB HBM3"

	// LabelVirtualDevice is <GPU UUID>::<i>, the device's CDI name.
	LabelVirtualDevice = "virtual_device"
	// LabelAddr is Cloudpods' addr, "1a:00.0-0".
	LabelAddr = "addr"
	// LabelClaim is a Kubernetes claim's namespace/name.
	LabelClaim = "claim"
	// LabelPod is a Cloudpods pod's name in the accounting,
	// <GPU UUID>::pod/<server>; LabelServer its server's id.
	LabelPod    = "pod"
	LabelServer = "server"
)

// gpuLabels are the labels of every per-GPU series; device series add
// deviceLabels. The Hostname is a constant label of the collector.
var (
	gpuLabels    = []string{LabelGPU, LabelUUID, LabelDevice, LabelPCIBusID}
	deviceLabels = append(append([]string(nil), gpuLabels...), LabelVirtualDevice, LabelAddr)
	// claimLabels are a claim's own device's: its GPU's, its name, its
	// claim.
	claimLabels = append(append([]string(nil), gpuLabels...), LabelVirtualDevice, LabelClaim)
	// podLabels are a Cloudpods pod's: its GPU's, its name, its server.
	podLabels = append(append([]string(nil), gpuLabels...), LabelPod, LabelServer)
)

// podLabelValues are one pod's values for podLabels; a pod of a GPU the
// status does not list has only its UUID.
func podLabelValues(p status.Pod, g *status.GPU) []string {
	v := []string{"", p.GPU, "", ""}
	if g != nil {
		v = gpuLabelValues(*g)
	}
	return append(v, p.Name, p.Server)
}

// gpuLabelValues are one GPU's values for gpuLabels.
func gpuLabelValues(g status.GPU) []string {
	return []string{strconv.Itoa(g.Index), g.UUID, "nvidia" + strconv.Itoa(g.Index), g.PCI.NVML()}
}

// deviceLabelValues are one device's values for deviceLabels. A device of a
// GPU the status does not list (a retiring GPU) has only its UUID.
func deviceLabelValues(d status.Device, g *status.GPU) []string {
	v := []string{"", d.GPU, "", ""}
	if g != nil {
		v = gpuLabelValues(*g)
	}
	return append(v, d.Name, d.Addr)
}

// claimLabelValues are one claim's values for claimLabels; a claim of a
// GPU the status does not list has only its UUID.
func claimLabelValues(c status.Claim, g *status.GPU) []string {
	v := []string{"", c.GPU, "", ""}
	if g != nil {
		v = gpuLabelValues(*g)
	}
	return append(v, c.Name, c.Claim)
}

// constLabels is the Hostname label, or none when the host name is unknown.
func constLabels(hostname string) prometheus.Labels {
	if hostname == "" {
		return nil
	}
	return prometheus.Labels{LabelHostname: hostname}
}

// ErrorKind classifies a failed reconcile for
// mps_daemon_reconcile_errors_total.
type ErrorKind string

// The kinds of reconcile failure.
const (
	// ErrorConfig: the configuration does not fit the GPUs; nothing changed.
	ErrorConfig ErrorKind = "config"
	// ErrorGPU: NVML failed (listing the GPUs, setting a compute mode).
	ErrorGPU ErrorKind = "gpu"
	// ErrorMPS: an MPS control daemon failed (start, limits, servers).
	ErrorMPS ErrorKind = "mps"
	// ErrorInventory: registering the host or syncing the devices failed.
	ErrorInventory ErrorKind = "inventory"
)

// ErrorKinds lists every kind; each has a series from the start, so that
// rate() sees the first error.
func ErrorKinds() []ErrorKind {
	return []ErrorKind{ErrorConfig, ErrorGPU, ErrorMPS, ErrorInventory}
}

// computeModes are nvidia-smi's spellings, exported as a state set.
var computeModes = []string{"Default", "Exclusive_Thread", "Prohibited", "Exclusive_Process"}

// serverStates are those MPS prints (docs/gpu-runs/mps-probe-fault.txt);
// each has a series per GPU, 0 when no server is in it.
var serverStates = []string{"ACTIVE", "FAULT"}

// viewStates are the view's states (status.View).
var viewStates = []string{status.ViewOn, status.ViewOff, status.ViewMissing, status.ViewFailed}

// accountingPolicies are host.conf's mps_accounting values.
var accountingPolicies = []string{"off", "report", "enforce"}

// foreignKinds are the kinds of commands another program sent a control
// daemon (pkg/mps's CommandKinds, which this package does not import);
// each has a series while control.log is followed.
var foreignKinds = []string{"daemon", "server"}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
