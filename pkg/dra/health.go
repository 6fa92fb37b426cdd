package dra

import (
	"context"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// The kubelet treats a device's health as unknown when no report refreshed
// it within its HealthCheckTimeout: reports go out on every change and
// again every healthResend, well within it.
const (
	healthCheckTimeout = 90 * time.Second
	healthResend       = 30 * time.Second
)

// WatchHealthStatus is the kubelet's health stream (DRAResourceHealth):
// the health of every published device, prepared ones included, at once
// and on every change, then again every healthResend, until ctx ends. A
// device of a GPU whose MPS is not serving is Unhealthy, so a pod using it
// shows its GPU failed (the pod's allocatedResourcesStatus); a device of a
// GPU the plan does not have any more (held by a claim until unprepared)
// is Unknown.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	resend := time.NewTicker(healthResend)
	defer resend.Stop()
	for {
		report, changed := d.healthReport()
		select {
		case <-ctx.Done():
			return nil
		case reports <- report:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-resend.C:
		}
	}
}

// healthReport is the health of the published devices, and what is closed
// when it changes.
func (d *Driver) healthReport() (kubeletplugin.DeviceHealthReport, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	planned := d.ledger.State().Planned
	var r kubeletplugin.DeviceHealthReport
	for _, dev := range d.shown {
		h := kubeletplugin.DeviceHealth{PoolName: d.Pool(), DeviceName: dev.Name, LastUpdated: d.checked, HealthCheckTimeout: healthCheckTimeout}
		switch {
		case !planned[dev.GPUUUID]:
			h.Health, h.Message = kubeletplugin.HealthStatusUnknown, "GPU "+dev.GPUUUID+" is not in the plan any more"
		case dev.Healthy:
			h.Health, h.Message = kubeletplugin.HealthStatusHealthy, "MPS of GPU "+dev.GPUUUID+" serves with its caps enforced"
		default:
			h.Health, h.Message = kubeletplugin.HealthStatusUnhealthy,
				"MPS of GPU "+dev.GPUUUID+" is not serving (control daemon down or server in FAULT): its CUDA clients fail; see mps-daemon's /status"
		}
		r.Devices = append(r.Devices, h)
	}
	return r, d.healthChanged
}
