package api

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// A device's patch applied to an empty device gives the device back, but
// its identity (id, host, creation), which no patch changes.
func TestPatchOfAppliedGivesTheDevice(t *testing.T) {
	d := IsolatedDevice{
		ID: "id", Name: "n", HostID: "h", DevType: DevTypeNvidiaMPS, SharingMode: "MPS", Model: "m", Addr: "1a:00.0-1",
		VendorDeviceID: "10de:2330", MdevID: "md", DevicePath: "GPU-1", RenderPath: "/dev/dri/renderD128", CDIName: "c",
		NumaNode: 1, PCIEInfo: &PCIEInfo{LaneWidth: 16}, Index: -1, DeviceMinor: -1, MPSMemoryLimit: 1, MPSMemoryTotal: 2,
		MPSThreadPercentage: 3, GuestID: "g", Unhealthy: true, PendingRemoval: true, HotPluggable: true, VirtualNum: 4,
		MemorySize: 5, CreatedAt: time.Unix(1, 0),
	}
	var got IsolatedDevice
	PatchOf(d).Apply(&got)
	want := d
	want.ID, want.HostID, want.CreatedAt = "", "", time.Time{}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("applied\n%+v\nwant\n%+v", got, want)
	}
}

// An empty name and a virtual_num of 0 are no change; a patch's JSON holds
// the fields it sets, pcie_info null where it clears it.
func TestPatchKeepsNameAndWritesOnlyItsFields(t *testing.T) {
	empty, zero, limit := "", 0, 7
	d := IsolatedDevice{Name: "kept", VirtualNum: 2, PCIEInfo: &PCIEInfo{LaneWidth: 8}}
	p := DevicePatch{Name: &empty, VirtualNum: &zero, MPSMemoryLimit: &limit, SetPCIEInfo: true}
	p.Apply(&d)
	if d.Name != "kept" || d.VirtualNum != 2 || d.MPSMemoryLimit != 7 || d.PCIEInfo != nil {
		t.Errorf("applied: %+v", d)
	}
	for _, tt := range []struct {
		p    DevicePatch
		want string
	}{
		{p, `{"name":"","mps_memory_limit":7,"virtual_num":0,"pcie_info":null}`},
		{DevicePatch{SetPCIEInfo: true}, `{"pcie_info":null}`},
		{DevicePatch{}, `{}`},
		{DevicePatch{SetPCIEInfo: true, PCIEInfo: &PCIEInfo{LaneWidth: 8}}, `{"pcie_info":{"lane_width":8,"throughput":"","transfer_rate_per_lane":"","version":""}}`},
	} {
		b, err := json.Marshal(tt.p)
		if err != nil || string(b) != tt.want {
			t.Errorf("%+v marshals to %s (%v), want %s", tt.p, b, err, tt.want)
		}
	}
}

// Every field of the record a client may change has its field in the
// patch (what the server decodes and the store applies): a field added to
// IsolatedDevice alone could not be written.
func TestPatchCoversTheRecord(t *testing.T) {
	pt := reflect.TypeFor[DevicePatch]()
	for _, f := range reflect.VisibleFields(reflect.TypeFor[IsolatedDevice]()) {
		if f.Tag.Get("db") == "-" || f.Name == "UpdateVersion" || f.Name == "UpdatedAt" {
			continue // details and what the store keeps
		}
		if _, ok := pt.FieldByName(f.Name); !ok {
			t.Errorf("DevicePatch has no field %s", f.Name)
		}
	}
}

// Every string field of the record a client writes has its bound, which
// the store enforces: the identity is bounded on its own, the details are
// never written.
func TestRecordStringsBounded(t *testing.T) {
	for _, f := range reflect.VisibleFields(reflect.TypeFor[IsolatedDevice]()) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Type.Kind() != reflect.String || f.Tag.Get("db") == "-" || name == "id" || name == "host_id" {
			continue
		}
		if _, ok := MaxDeviceFieldBytes(name); !ok {
			t.Errorf("%s has no bound in MaxDeviceFieldBytes", name)
		}
	}
}
