package gpu

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"yunion.io/x/mps-daemon/pkg/pci"
)

// NUMANode reads the NUMA node of a PCI device from
// <sysfsRoot>/bus/pci/devices/<address>/numa_node. NVML does not report it
// on every driver, and Cloudpods writes -1 when unknown, so every failure
// (no file, unreadable, not a number) gives -1 rather than an error: the node
// is a placement hint, not something to stop for.
func NUMANode(sysfsRoot string, a pci.Address) int {
	data, err := os.ReadFile(filepath.Join(sysfsRoot, "bus", "pci", "devices", a.String(), "numa_node"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || n < -1 {
		return -1
	}
	return n
}

// FillNUMA sets NUMANode of every GPU from sysfs.
func FillNUMA(sysfsRoot string, gpus []Info) {
	for i := range gpus {
		gpus[i].NUMANode = NUMANode(sysfsRoot, gpus[i].PCI)
	}
}
