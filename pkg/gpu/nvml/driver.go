//go:build cgo

package nvml

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// DriverVersion is the NVIDIA driver's version as NVML reports it
// ("580.159.04"); the Kubernetes plugin publishes it as a device attribute.
func (a *Adapter) DriverVersion() (string, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		return "", fmt.Errorf("reading the driver version: NVML is closed")
	}
	v, ret := a.lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("reading the driver version: %w", ret)
	}
	return v, nil
}
