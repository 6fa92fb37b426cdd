package mpsctl

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"yunion.io/x/mps-daemon/internal/testsupport/golden"
	"yunion.io/x/mps-daemon/pkg/api"
)

const (
	p40HostID = "197c1d98-316a-42e6-889d-68497153cc82"
	p40UUID   = "GPU-76aef7ff-372d-2432-b4b4-beca4d8d3400"
)

// p40Slices are the 4 MPS slices of the Tesla P40 in Cloudpods' documentation.
func p40Slices() []api.IsolatedDevice {
	ids := []string{
		"604b59e6-745b-4834-8c19-229af27c4333",
		"0c5e4b1a-5f39-4f5e-9a57-2f6f3f1c8e01",
		"7f2d0e8b-93a4-4c61-b0d2-6a1e5c4b3a02",
		"b83c6f1d-2e47-4a9b-8c15-d0e9f7a6b503",
	}
	created := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	out := make([]api.IsolatedDevice, len(ids))
	for i, id := range ids {
		out[i] = api.IsolatedDevice{
			ID:             id,
			Name:           fmt.Sprintf("Tesla P40-%d", i),
			HostID:         p40HostID,
			DevType:        api.DevTypeNvidiaMPS,
			Model:          "Tesla P40",
			Addr:           fmt.Sprintf("00:06.0-%d", i),
			VendorDeviceID: "10de:1b38",
			DevicePath:     p40UUID,
			NumaNode:       -1,
			PCIEInfo: &api.PCIEInfo{
				LaneWidth: 16, Throughput: "15.76 GB/s",
				TransferRatePerLane: "8GT/s", Version: "3.0",
			},
			Index:               -1,
			DeviceMinor:         -1,
			MPSMemoryLimit:      24576 / 4,
			MPSMemoryTotal:      24576,
			MPSThreadPercentage: 25,
			CreatedAt:           created,
			UpdatedAt:           created,
		}
	}
	return out
}

func mustObjects(t *testing.T, devs []api.IsolatedDevice) []Object {
	t.Helper()
	objs, err := ToObjects(devs)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// headerCells splits the header row (the second line) of a table.
func headerCells(table string) []string {
	lines := strings.Split(table, "\n")
	var out []string
	for c := range strings.SplitSeq(strings.Trim(lines[1], "|"), "|") {
		out = append(out, strings.TrimSpace(c))
	}
	return out
}

func TestListTableGolden(t *testing.T) {
	withGuest := p40Slices()
	withGuest[2].GuestID = "e1f2a3b4-c5d6-4e7f-8091-a2b3c4d5e6f7"
	// After a resize 4 -> 3 while slice 3 is held: it stays, pending removal.
	pending := p40Slices()
	pending[3].GuestID = "pod-3"
	pending[3].PendingRemoval = true

	tests := []struct {
		name    string
		devs    []api.IsolatedDevice
		page    Page
		golden  string
		headers []string
	}{
		{
			name:   "reference P40",
			devs:   p40Slices(),
			page:   Page{Total: 4, Limit: 20, Offset: 0},
			golden: "isolated-device-list-p40.golden",
			headers: []string{"ID", "Dev_type", "Model", "Addr", "Vendor_device_id", "Host_id",
				"numa_node", "Device_path", "PCIE_Info", "Index", "Device_minor"},
		},
		{
			name:   "one slice held by a guest",
			devs:   withGuest,
			page:   Page{Total: 4, Limit: 20, Offset: 0},
			golden: "isolated-device-list-guest.golden",
			headers: []string{"ID", "Dev_type", "Model", "Addr", "Vendor_device_id", "Host_id",
				"numa_node", "Guest_id", "Device_path", "PCIE_Info", "Index", "Device_minor"},
		},
		{
			name:   "held slice pending removal",
			devs:   pending,
			page:   Page{Total: 4, Limit: 20, Offset: 0},
			golden: "isolated-device-list-pending.golden",
			headers: []string{"ID", "Dev_type", "Model", "Addr", "Vendor_device_id", "Host_id",
				"numa_node", "Guest_id", "Device_path", "PCIE_Info", "Index", "Device_minor", "Pending_removal"},
		},
		{
			name:   "empty",
			devs:   nil,
			page:   Page{Total: 0, Limit: 20, Offset: 0},
			golden: "isolated-device-list-empty.golden",
			headers: []string{"ID", "Dev_type", "Model", "Addr", "Vendor_device_id", "Host_id",
				"numa_node", "Device_path", "Index", "Device_minor"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ListTable(isolatedDeviceColumns(false), mustObjects(t, tt.devs), tt.page)
			if h := headerCells(got); !slices.Equal(h, tt.headers) {
				t.Errorf("columns = %q, want %q", h, tt.headers)
			}
			golden.Check(t, tt.golden, []byte(got))
		})
	}
}

func TestListTableReferenceRow(t *testing.T) {
	got := ListTable(isolatedDeviceColumns(false), mustObjects(t, p40Slices()), Page{Total: 4, Limit: 20})
	want := "| 604b59e6-745b-4834-8c19-229af27c4333 | NVIDIA_MPS | Tesla P40 | 00:06.0-0 | 10de:1b38        | " +
		"197c1d98-316a-42e6-889d-68497153cc82 | -1        | GPU-76aef7ff-372d-2432-b4b4-beca4d8d3400 | " +
		`{"lane_width":16,"throughput":"15.76 GB/s","transfer_rate_per_lane":"8GT/s","version":"3.0"} | -1    | -1           |`
	if lines := strings.Split(got, "\n"); lines[3] != want {
		t.Errorf("first row:\n got %s\nwant %s", lines[3], want)
	}
	if !strings.HasSuffix(got, "*** Total: 4 Pages: 1 Limit: 20 Offset: 0 Page: 1 ***\n") {
		t.Errorf("footer missing or wrong:\n%s", got)
	}
}

func TestFooter(t *testing.T) {
	tests := []struct {
		page Page
		want string
	}{
		{Page{Total: 4, Limit: 20, Offset: 0}, "*** Total: 4 Pages: 1 Limit: 20 Offset: 0 Page: 1 ***"},
		{Page{Total: 45, Limit: 20, Offset: 20}, "*** Total: 45 Pages: 3 Limit: 20 Offset: 20 Page: 2 ***"},
		{Page{Total: 40, Limit: 20, Offset: 20}, "*** Total: 40 Pages: 2 Limit: 20 Offset: 20 Page: 2 ***"},
		{Page{Total: 45, Limit: 20, Offset: 25}, "*** Total: 45 Pages: 3 Limit: 20 Offset: 25 Page: 2 ***"},
		{Page{Total: 7, Limit: 0, Offset: 0}, "*** Total: 7 Pages: 1 Limit: 0 Offset: 0 Page: 1 ***"},
		{Page{Total: 0, Limit: 20, Offset: 0}, "*** Total: 0 Pages: 0 Limit: 20 Offset: 0 Page: 1 ***"},
		{Page{Total: 20, Limit: 20, MarkerField: "seq", MarkerOrder: "ASC", NextMarker: "41"}, "*** Total: 20 Field: seq Order: ASC NextMarker: 41 ***"},
		{Page{Total: 3, Limit: 20, MarkerField: "seq", MarkerOrder: "DESC"}, "*** Total: 3 Field: seq Order: DESC ***"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := Footer(tt.page); got != tt.want {
				t.Errorf("Footer(%+v) = %q", tt.page, got)
			}
		})
	}
}

func TestCell(t *testing.T) {
	tests := []struct {
		raw    string
		want   string
		filled bool
	}{
		{``, "", false},
		{`null`, "", false},
		{`""`, "", false},
		{`"Tesla P40"`, "Tesla P40", true},
		{`-1`, "-1", true},
		{`0`, "0", true},
		{`false`, "", false}, // a state a row is not in
		{`true`, "true", true},
		{`{ "b": 1,  "a": [1, 2] }`, `{"b":1,"a":[1,2]}`, true},
		{`"a \"quoted\" name"`, `a "quoted" name`, true},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			got, ok := Cell(json.RawMessage(tt.raw))
			if got != tt.want || ok != tt.filled {
				t.Errorf("Cell(%s) = %q, %v; want %q, %v", tt.raw, got, ok, tt.want, tt.filled)
			}
		})
	}
}

func TestFormatTableAlignsRunes(t *testing.T) {
	got := FormatTable([]string{"Name", "Model"}, [][]string{
		{"größe", "Tesla P40"},
		{"x", "H200 · 141 GB"},
	})
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) != 6 {
		t.Fatalf("got %d lines, want 6:\n%s", len(lines), got)
	}
	for i, l := range lines {
		if n := utf8.RuneCountInString(l); n != utf8.RuneCountInString(lines[0]) {
			t.Errorf("line %d is %d runes, border is %d:\n%s", i, n, utf8.RuneCountInString(lines[0]), got)
		}
	}
	if lines[3] != "| größe | Tesla P40     |" {
		t.Errorf("row = %q", lines[3])
	}
}

func TestShowTableGolden(t *testing.T) {
	d := p40Slices()[0]
	d.GuestID = "e1f2a3b4-c5d6-4e7f-8091-a2b3c4d5e6f7"
	o, err := ToObject(d)
	if err != nil {
		t.Fatal(err)
	}
	got := ShowTable(o)
	if !strings.HasPrefix(got, "+") || headerCells(got)[0] != "Field" {
		t.Errorf("not a Field/Value table:\n%s", got)
	}
	if strings.Contains(got, "| mdev_id") || strings.Contains(got, "| render_path") {
		t.Errorf("empty fields printed:\n%s", got)
	}
	golden.Check(t, "isolated-device-show.golden", []byte(got))
}
