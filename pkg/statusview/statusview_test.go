package statusview

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/golden"
	"yunion.io/x/mps-daemon/pkg/clientreport"
	"yunion.io/x/mps-daemon/pkg/pci"
	"yunion.io/x/mps-daemon/pkg/status"
	"yunion.io/x/mps-daemon/pkg/units"
)

// The host the status shows: two H200s, their UUIDs and memory.
const (
	g0                   = "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"
	g1                   = "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd"
	h200Memory units.MiB = 143771
)

// busyHost is a status with everything an operator may meet: a rejected
// edit, a GPU whose server is in FAULT, a retiring GPU, held, free,
// unmeasured, pending and over-cap devices.
func busyHost() status.Status {

	return status.Status{
		Ready: false, Simulated: true, HostID: "5c0f3e2a-9b1d-4c7e-8f6a-2d3b4c5d6e7f", HostName: "node-1",
		LastReconcile:      time.Date(2026, 11, 22, 2, 41, 4, 0, time.UTC),
		LastError:          "gpu 0000:db:00.0 (" + g1 + "): MPS control daemon: cannot start\nsecond cause, on its own line",
		InventoryReachable: true, ConfigGeneration: 3,
		ConfigError:    "/etc/yunion/host_container_device.yml:5: virtual_number: must be 1 to 48, got 64",
		VirtualDevices: 6,
		GPUs: []status.GPU{
			{UUID: g0, Index: 0, Minor: 0, PCI: pci.Address{Bus: 0x1a}, Model: "NVIDIA H200", MemoryTotal: h200Memory.Bytes(), MemoryUsed: 20480 << 20,
				ComputeMode: "Exclusive_Process", ControlDaemonUp: true, Servers: []status.Server{{PID: 4242, Status: "ACTIVE", Clients: 2}},
				VirtualNumber: 4, MemoryLimit: h200Memory / 4, ThreadPercentage: 100, Enforced: true, Healthy: true,
				ClientPriority: 1, QoS: &status.QoS{LatencySlices: []int{0}, BatchThreadPercentage: 30, ReservePercent: 8}},
			{UUID: g1, Index: 1, Minor: 1, PCI: pci.Address{Bus: 0xdb}, Model: "NVIDIA H200", MemoryTotal: h200Memory.Bytes(),
				ComputeMode: "Exclusive_Process", ControlDaemonUp: true, Servers: []status.Server{{PID: 5151, Status: "FAULT", Clients: 1}},
				VirtualNumber: 2, MemoryLimit: h200Memory / 2, ThreadPercentage: 50, Enforced: true,
				Reason:                    "MPS server 5151 is FAULT (clients [5200]); it recovers once they exit",
				PrivilegedSocketReachable: true, PrivilegedSocketReason: "/run/mps/pipe and /run/mps/pipe.privileged are on different file systems (is the pipe root a mount point?): renameat2: invalid cross-device link"},
		},
		Retiring: []string{"GPU-00000002-aaaa-bbbb-cccc-dddddddddddd"},
		Accounting: &status.Accounting{Policy: "enforce", Unknown: []clientreport.Unknown{{PID: 77, GPU: g0, UsedBytes: 1 << 30, Reason: "no YUNION_MPS_VIRTUAL_DEVICE"}},
			Mismatches: []clientreport.Mismatch{{PID: 81, GPU: g0, UsedBytes: 6144 << 20, Device: g0 + "::2", Source: "identity", Environment: g0 + "::3"},
				{PID: 82, GPU: g0, UsedBytes: 30000 << 20, Device: g0 + "::2", Source: "ancestor"}},
			QoSEscapes: []clientreport.Escape{{PID: 91, GPU: g0, UsedBytes: 2048 << 20, Device: g0 + "::3", Source: "identity",
				Environment: clientreport.QoSEnv{ClientPriority: clientreport.EnvValue{Value: "0", Set: true}},
				Reason:      "no CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: it gets the server's 100%, its device's share is 30%; CUDA_MPS_CLIENT_PRIORITY=0 raises it above its device's priority 1"}},
			WithoutView: []clientreport.WithoutView{{PID: 95, GPU: g0, UsedBytes: 4096 << 20, Device: g0 + "::0", Source: "identity",
				Reason: "no libyunion-mps-view.so in its memory map: CUDA and NVML tell it the whole GPU's memory, not its device's cap"}},
			NewClients: &status.NewClients{Logs: []status.ClientLog{{Path: "/tmp/nvidia-mps/log/" + g0 + "/control.log", GPUs: []string{g0}, Following: true, Clients: 14,
				ForeignCommands: map[string]uint64{"server": 1}, LastForeign: "2026-11-29 04:43:49.847 set_active_thread_percentage 873 12"},
				{Path: "/tmp/nvidia-mps/log/" + g1 + "/control.log", GPUs: []string{g1}, Error: "cannot watch /tmp/nvidia-mps/log/" + g1 + " (tried again in 30s): no such file or directory"}},
				PollIntervalSeconds: 0.1, PolledGPUs: []string{g0, g1}, Checked: 12, Exited: 1, Reused: 0},
			Terminations: []status.Termination{
				{PID: 95, GPU: g0, Device: g0 + "::2", Cause: "limit_escape", Step: "sigkill", Detected: "connect", At: time.Date(2026, 11, 22, 2, 40, 0, 0, time.UTC),
					EscapeFrom: "client_start", EscapeSeconds: 0.004},
				{PID: 96, GPU: g0, Device: g0 + "::2", Cause: "memory_cap", Step: "terminate_client", Detected: "poll", At: time.Date(2026, 11, 22, 2, 41, 0, 0, time.UTC),
					EscapeFrom: "cap_crossed", EscapeSeconds: 0.012, EscapeSecondsAtMost: 0.112},
				{PID: 97, GPU: g0, Device: g0 + "::pod/6a2d3e86-33c5-4b4f-8bbf-7a1e2c3d4e5f", Server: "6a2d3e86-33c5-4b4f-8bbf-7a1e2c3d4e5f", Cause: "memory_cap",
					Step: "terminate_client", Detected: "poll", At: time.Date(2026, 11, 22, 2, 41, 10, 0, time.UTC), EscapeFrom: "cap_crossed", EscapeSeconds: 0.05}}},
		Pods: []status.Pod{
			{Name: g0 + "::pod/6a2d3e86-33c5-4b4f-8bbf-7a1e2c3d4e5f", Server: "6a2d3e86-33c5-4b4f-8bbf-7a1e2c3d4e5f", ServerName: "pod-a", GPU: g0,
				Slices: 1, MemoryLimit: (h200Memory / 4).Bytes(), UsedBytes: 30000 << 20, Clients: 2, LastStep: "terminate_client"},
			{Name: g0 + "::pod/pod-b", Server: "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0", ServerName: "pod-b", GPU: g0,
				Slices: 2, MemoryLimit: (h200Memory / 2).Bytes(), UsedBytes: 80000 << 20, Clients: 3, OverCap: true},
		},
		CDI:  &status.CDI{Path: "/etc/cdi/yunion.io-mps-gpu.yaml", Devices: 6},
		View: &status.View{Library: "/usr/lib/yunion-mps/libyunion-mps-view.so", State: status.ViewOn, Devices: 6},
		Devices: []status.Device{
			{Name: g0 + "::0", ID: "d0", Addr: "1a:00.0-0", GPU: g0, MemoryLimit: (h200Memory / 4).Bytes(), UsedBytes: 12288 << 20, Clients: 2, WithoutView: 1, Measured: true, Guest: "pod-a", Healthy: true,
				ThreadPercentage: 100, QoSClass: "latency"},
			{Name: g0 + "::1", ID: "d1", Addr: "1a:00.0-1", GPU: g0, MemoryLimit: (h200Memory / 4).Bytes(), Measured: true, Healthy: true, ThreadPercentage: 30, QoSClass: "batch", ClientPriority: 1},
			{Name: g0 + "::2", ID: "d2", Addr: "1a:00.0-2", GPU: g0, MemoryLimit: (h200Memory / 4).Bytes(), UsedBytes: 36000 << 20, Clients: 1, Measured: true, OverCap: true, Guest: "pod-b", Healthy: true,
				ThreadPercentage: 30, QoSClass: "batch", ClientPriority: 1},
			{Name: g0 + "::3", ID: "d3", Addr: "1a:00.0-3", GPU: g0, MemoryLimit: (h200Memory / 4).Bytes(), Measured: true, Healthy: true, ThreadPercentage: 30, QoSClass: "batch", ClientPriority: 1},
			{Name: g1 + "::0", ID: "d4", Addr: "db:00.0-0", GPU: g1, MemoryLimit: (h200Memory / 2).Bytes(), Guest: "pod-c", Healthy: false, ThreadPercentage: 50},
			{Name: g1 + "::1", ID: "d5", Addr: "db:00.0-1", GPU: g1, MemoryLimit: (h200Memory / 2).Bytes(), Healthy: false, PendingRemoval: true, Guest: "pod-d", ThreadPercentage: 50},
		},
	}
}

// claimsHost is a Kubernetes node whose GPU 0 is shared by claims of any
// size: its whole-GPU device, and three claims' own devices, one measured
// over its size with an escaped client, one on its way.
func claimsHost() status.Status {
	st := status.Status{
		Ready: true, HostID: "node-1", HostName: "node-1", LastReconcile: time.Date(2026, 11, 22, 2, 41, 4, 0, time.UTC), ConfigGeneration: 1,
		VirtualDevices: 1,
		GPUs: []status.GPU{{UUID: g0, Index: 0, PCI: pci.Address{Bus: 0x1a}, Model: "NVIDIA H200", MemoryTotal: h200Memory.Bytes(),
			ComputeMode: "Exclusive_Process", ControlDaemonUp: true, VirtualNumber: 8, MemoryLimit: h200Memory, ThreadPercentage: 100, Enforced: true, Healthy: true}},
		Accounting: &status.Accounting{Policy: "enforce"},
		Devices:    []status.Device{{Name: g0 + "::0", Addr: "1a:00.0-0", GPU: g0, MemoryLimit: h200Memory.Bytes(), ThreadPercentage: 100, Measured: true, Healthy: true}},
	}
	claim := func(slot int, name string, sizeMiB units.MiB, threads int) status.Claim {
		dev := g0 + "::" + strconv.Itoa(1000+slot)
		return status.Claim{Claim: name, UID: "5a1e0000-0000-4000-8000-00000000000" + strconv.Itoa(slot), Device: status.Device{Name: dev, GPU: g0,
			MemoryLimit: sizeMiB.Bytes(), ThreadPercentage: threads, Healthy: true, CDIName: "yunion.io/mps-claim=" + dev}}
	}
	a, b, c := claim(0, "default/trainer", 40<<10, 100), claim(1, "ml/notebook", 20<<10, 30), claim(2, "ml/new", 20<<10, 100)
	a.Measured, a.UsedBytes, a.Clients = true, 30<<30, 3
	b.Measured, b.UsedBytes, b.Clients, b.OverCap, b.Escapes = true, 21<<30, 2, true, 1
	st.Claims = []status.Claim{a, b, c}
	return st
}

func TestStatusViewGolden(t *testing.T) {
	tests := []struct {
		name string
		st   status.Status
	}{
		{"busy", busyHost()},
		{"starting", status.Status{ConfigGeneration: 1}},
		{"view-missing", status.Status{ConfigGeneration: 1, View: &status.View{Library: "/usr/lib/yunion-mps/libyunion-mps-view.so", State: status.ViewMissing,
			Reason: "/usr/lib/yunion-mps/libyunion-mps-view.so does not exist (package yunion-mps-daemon installs it): containers see the whole GPU"}}},
		{"claims", claimsHost()},
	}
	now := time.Date(2026, 11, 22, 2, 41, 16, 0, time.UTC)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Write(&b, tt.st, now); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, "status-"+tt.name+".golden", b.Bytes())
		})
	}
}

func TestStatusOfADaemonThatIsNotRunning(t *testing.T) {
	srv := httptest.NewServer(nil)
	addr := strings.TrimPrefix(srv.URL, "http://")
	srv.Close() // nothing listens there now
	_, err := Fetch(context.Background(), addr, 5*time.Second)
	if err == nil {
		t.Fatal("want an error")
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "no daemon answers at "+addr) || !strings.Contains(msg, "refused") {
		t.Errorf("want one line naming the address and the cause, got %q", msg)
	}
}
