package api

import (
	"encoding/json"
	"testing"
)

// Cloudpods' host agent sends dev_type, model, addr, vendor_device_id and
// numa_node always, device_path, pcie_info and the MPS fields when set, and
// nothing else of the record.
func TestHostAgentFields(t *testing.T) {
	d := IsolatedDevice{ID: "id", Name: "n", HostID: "h", DevType: DevTypeNvidiaMPS, Model: "m", Addr: "1a:00.0-1",
		VendorDeviceID: "10de:2330", NumaNode: -1, Index: -1, DeviceMinor: -1, CDIName: "c", GuestID: "g", VirtualNum: 1}
	for _, tt := range []struct {
		d    func(IsolatedDevice) IsolatedDevice
		want string
	}{
		{func(d IsolatedDevice) IsolatedDevice { return d },
			`{"addr":"1a:00.0-1","dev_type":"NVIDIA_MPS","model":"m","numa_node":-1,"vendor_device_id":"10de:2330"}`},
		{func(d IsolatedDevice) IsolatedDevice {
			d.DevicePath, d.PCIEInfo, d.MPSMemoryLimit, d.MPSMemoryTotal, d.MPSThreadPercentage = "GPU-1", &PCIEInfo{LaneWidth: 16}, 1, 2, 3
			return d
		}, `{"addr":"1a:00.0-1","dev_type":"NVIDIA_MPS","device_path":"GPU-1","model":"m","mps_memory_limit":1,"mps_memory_total":2,` +
			`"mps_thread_percentage":3,"numa_node":-1,"pcie_info":{"lane_width":16,"throughput":"","transfer_rate_per_lane":"","version":""},"vendor_device_id":"10de:2330"}`},
	} {
		b, err := json.Marshal(HostAgentFields(tt.d(d)))
		if err != nil || string(b) != tt.want {
			t.Errorf("sent %s (%v), want %s", b, err, tt.want)
		}
	}
}

// A row needs an update when a field the host agent sends differs, but
// pcie_info only while the row has none; other fields do not count.
func TestHostAgentChanged(t *testing.T) {
	cur := IsolatedDevice{Model: "m", MPSMemoryTotal: 2, PCIEInfo: &PCIEInfo{LaneWidth: 16}}
	for _, tt := range []struct {
		name string
		want func(IsolatedDevice) IsolatedDevice
		diff bool
	}{
		{"same", func(d IsolatedDevice) IsolatedDevice { return d }, false},
		{"not sent", func(d IsolatedDevice) IsolatedDevice { d.CDIName, d.GuestID, d.Index = "c", "g", 5; return d }, false},
		{"memory total", func(d IsolatedDevice) IsolatedDevice { d.MPSMemoryTotal = 0; return d }, true},
		{"other pcie", func(d IsolatedDevice) IsolatedDevice { d.PCIEInfo = &PCIEInfo{LaneWidth: 8}; return d }, false},
	} {
		if got := HostAgentChanged(cur, tt.want(cur)); got != tt.diff {
			t.Errorf("%s: changed %v, want %v", tt.name, got, tt.diff)
		}
	}
	if !HostAgentChanged(IsolatedDevice{}, IsolatedDevice{PCIEInfo: &PCIEInfo{}}) {
		t.Error("pcie_info where the row has none is no change")
	}
}
