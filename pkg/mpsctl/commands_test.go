package mpsctl

import (
	"encoding/json"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

func TestIsolatedDeviceList(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		t.Parallel()
		inv := newInventory(t, open())
		base := []string{"ID", "Dev_type", "Model", "Addr", "Vendor_device_id", "Host_id", "numa_node", "Device_path", "PCIE_Info", "Index", "Device_minor"}
		withGuest := slices.Insert(slices.Clone(base), 7, "Guest_id")

		tests := []struct {
			name       string
			args       []string
			wantAddrs  []string
			wantCols   []string
			wantFooter string
		}{
			{
				name:       "host by name",
				args:       []string{"--host", "gpu-node-1"},
				wantAddrs:  []string{"00:06.0-0", "00:06.0-1", "00:06.0-2", "00:06.0-3"},
				wantCols:   withGuest,
				wantFooter: "*** Total: 4 Pages: 1 Limit: 20 Offset: 0 Page: 1 ***",
			},
			{
				name:       "host by id",
				args:       []string{"--host", inv.Host2.ID, "--dev-type", api.DevTypeNvidiaMPS},
				wantAddrs:  []string{"1a:00.0-0", "1a:00.0-1", "1a:00.0-2"},
				wantCols:   base,
				wantFooter: "*** Total: 3 Pages: 1 Limit: 20 Offset: 0 Page: 1 ***",
			},
			{
				name:       "unused leaves out the held slice and its column",
				args:       []string{"--unused", "--model", "Tesla P40"},
				wantAddrs:  []string{"00:06.0-0", "00:06.0-1", "00:06.0-3"},
				wantCols:   base,
				wantFooter: "*** Total: 3 Pages: 1 Limit: 20 Offset: 0 Page: 1 ***",
			},
			{
				name:      "other dev type shows its own columns",
				args:      []string{"--dev-type", "GPU-HPC"},
				wantAddrs: []string{"3b:00.0"},
				wantCols: []string{"ID", "Dev_type", "Model", "Addr", "Vendor_device_id", "Host_id", "numa_node",
					"Render_path", "Index", "Device_minor"},
				wantFooter: "*** Total: 1 Pages: 1 Limit: 20 Offset: 0 Page: 1 ***",
			},
			{
				name:       "gpu",
				args:       []string{"--gpu", h100UUID, "--limit", "2"},
				wantAddrs:  []string{"1a:00.0-0", "1a:00.0-1"},
				wantCols:   base,
				wantFooter: "*** Total: 3 Pages: 2 Limit: 2 Offset: 0 Page: 1 ***",
			},
			{
				name:       "server",
				args:       []string{"--server", guestID},
				wantAddrs:  []string{"00:06.0-2"},
				wantCols:   withGuest,
				wantFooter: "*** Total: 1 Pages: 1 Limit: 20 Offset: 0 Page: 1 ***",
			},
			{
				name:       "second page",
				args:       []string{"--limit", "3", "--offset", "3"},
				wantAddrs:  []string{"00:06.0-3", "1a:00.0-0", "1a:00.0-1"},
				wantCols:   base,
				wantFooter: "*** Total: 8 Pages: 3 Limit: 3 Offset: 3 Page: 2 ***",
			},
			{
				name:       "details fill the Host column",
				args:       []string{"--details", "--host", "gpu-node-2", "--dev-type", api.DevTypeNvidiaMPS, "--limit", "1"},
				wantAddrs:  []string{"1a:00.0-0"},
				wantCols:   slices.Insert(slices.Insert(slices.Clone(base), 6, "Host"), 3, "Vendor"),
				wantFooter: "*** Total: 3 Pages: 3 Limit: 1 Offset: 0 Page: 1 ***",
			},
			{
				name:       "nothing matches",
				args:       []string{"--model", "Tesla V100"},
				wantCols:   []string{"ID", "Dev_type", "Model", "Addr", "Vendor_device_id", "Host_id", "numa_node", "Device_path", "Index", "Device_minor"},
				wantFooter: "*** Total: 0 Pages: 0 Limit: 20 Offset: 0 Page: 1 ***",
			},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := runMpsctl(t, nil, append([]string{"--url", inv.URL, "--token", inv.Token, "isolated-device-list"}, tt.args...)...)
				if r.Code != ExitOK || r.Stderr != "" {
					t.Fatalf("exit %d, stderr %q", r.Code, r.Stderr)
				}
				if got := headerCells(r.Stdout); !slices.Equal(got, tt.wantCols) {
					t.Errorf("columns = %q\nwant %q", got, tt.wantCols)
				}
				var addrs []string
				for _, row := range tableRows(t, r.Stdout) {
					addrs = append(addrs, row["Addr"])
				}
				if !slices.Equal(addrs, tt.wantAddrs) {
					t.Errorf("rows = %q, want %q\n%s", addrs, tt.wantAddrs, r.Stdout)
				}
				if got := footer(r.Stdout); got != tt.wantFooter {
					t.Errorf("footer = %q, want %q", got, tt.wantFooter)
				}
			})
		}
	})
}

func TestIsolatedDeviceListCells(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		t.Parallel()
		inv := newInventory(t, open())
		r := runMpsctl(t, nil, "--url", inv.URL, "--token", inv.Token, "isolated-device-list", "--host", "gpu-node-2", "--details", "--limit", "1")
		rows := tableRows(t, r.Stdout)
		if len(rows) != 1 {
			t.Fatalf("want 1 row:\n%s", r.Stdout)
		}
		want := map[string]string{
			"ID": inv.Devices[4].ID, "Dev_type": "NVIDIA_MPS", "Model": "NVIDIA H100 80GB HBM3", "Addr": "1a:00.0-0",
			"Vendor_device_id": "10de:2330", "Host_id": inv.Host2.ID, "Host": "gpu-node-2", "numa_node": "0",
			"Device_path": h100UUID, "Index": "-1", "Device_minor": "-1",
			"PCIE_Info": `{"lane_width":16,"throughput":"63.01 GB/s","transfer_rate_per_lane":"32GT/s","version":"5.0"}`,
		}
		for k, v := range want {
			if rows[0][k] != v {
				t.Errorf("%s = %q, want %q", k, rows[0][k], v)
			}
		}
	})
}

func TestIsolatedDeviceListJSON(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		t.Parallel()
		inv := newInventory(t, open())
		r := runMpsctl(t, nil, "--url", inv.URL, "--token", inv.Token, "-o", "json", "isolated-device-list", "--host", "gpu-node-1", "--limit", "2")
		if r.Code != ExitOK {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		if !strings.HasPrefix(r.Stdout, "{\n  \"isolated_devices\": [") {
			t.Errorf("not the indented envelope:\n%s", r.Stdout)
		}
		var list api.IsolatedDeviceList
		if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil {
			t.Fatalf("output does not parse: %v\n%s", err, r.Stdout)
		}
		if list.Total != 4 || list.Limit != 2 || list.Offset != 0 || len(list.IsolatedDevices) != 2 {
			t.Errorf("envelope = total %d limit %d offset %d rows %d", list.Total, list.Limit, list.Offset, len(list.IsolatedDevices))
		}
		if got := list.IsolatedDevices[0]; got.ID != inv.Devices[0].ID || got.PCIEInfo == nil || got.PCIEInfo.Throughput != "15.76 GB/s" {
			t.Errorf("first device = %+v, want %+v", got, inv.Devices[0])
		}
	})
}

func TestIsolatedDeviceShow(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		t.Parallel()
		inv := newInventory(t, open())
		held := inv.Devices[2]

		t.Run("table", func(t *testing.T) {
			r := runMpsctl(t, nil, "--url", inv.URL, "--token", inv.Token, "isolated-device-show", held.ID)
			if r.Code != ExitOK {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			if got := headerCells(r.Stdout); !slices.Equal(got, []string{"Field", "Value"}) {
				t.Errorf("header = %q", got)
			}
			fields := map[string]string{}
			var order []string
			for _, row := range tableRows(t, r.Stdout) {
				fields[row["Field"]] = row["Value"]
				order = append(order, row["Field"])
			}
			if !slices.IsSorted(order) {
				t.Errorf("fields not sorted: %q", order)
			}
			for k, v := range map[string]string{
				"id": held.ID, "addr": "00:06.0-2", "guest_id": guestID, "host_id": inv.Host1.ID,
				"numa_node": "-1", "mps_memory_limit": "6144",
			} {
				if fields[k] != v {
					t.Errorf("%s = %q, want %q", k, fields[k], v)
				}
			}
			// A show has the details, as Cloudpods': host and vendor.
			if fields["host"] != "gpu-node-1" || fields["vendor"] != "NVIDIA" {
				t.Errorf("host %q vendor %q, want the details", fields["host"], fields["vendor"])
			}
			for _, empty := range []string{"mdev_id", "render_path", "sharing_mode"} {
				if _, ok := fields[empty]; ok {
					t.Errorf("empty field %s printed", empty)
				}
			}
		})
		t.Run("json", func(t *testing.T) {
			r := runMpsctl(t, nil, "--url", inv.URL, "--token", inv.Token, "isolated-device-show", "-o", "json", held.ID)
			var body api.IsolatedDeviceBody
			if err := json.Unmarshal([]byte(r.Stdout), &body); err != nil {
				t.Fatalf("output does not parse: %v\n%s", err, r.Stdout)
			}
			if body.IsolatedDevice.ID != held.ID || body.IsolatedDevice.GuestID != guestID {
				t.Errorf("device = %+v", body.IsolatedDevice)
			}
		})
	})
}

func TestHostList(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		t.Parallel()
		inv := newInventory(t, open())
		r := runMpsctl(t, nil, "--url", inv.URL, "--token", inv.Token, "host-list")
		if r.Code != ExitOK {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		if got, want := headerCells(r.Stdout), []string{"ID", "Name", "Access_ip", "Created_at"}; !slices.Equal(got, want) {
			t.Errorf("columns = %q, want %q", got, want)
		}
		if got := footer(r.Stdout); got != "*** Total: 2 Pages: 1 Limit: 20 Offset: 0 Page: 1 ***" {
			t.Errorf("footer = %q", got)
		}

		r = runMpsctl(t, nil, "--url", inv.URL, "--token", inv.Token, "host-list", "--name", "gpu-node-2")
		rows := tableRows(t, r.Stdout)
		if len(rows) != 1 || rows[0]["ID"] != inv.Host2.ID || rows[0]["Name"] != "gpu-node-2" {
			t.Errorf("--name gpu-node-2 gave:\n%s", r.Stdout)
		}
		if slices.Contains(headerCells(r.Stdout), "Access_ip") {
			t.Errorf("Access_ip shown though no row fills it:\n%s", r.Stdout)
		}
	})
}

func TestRuntimeErrors(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		t.Parallel()
		inv := newInventory(t, open())

		// A port that was just free: nothing listens there any more.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		deadURL := "http://" + l.Addr().String()
		l.Close()

		tests := []struct {
			name string
			args []string
			env  map[string]string
			want *regexp.Regexp
		}{
			{
				name: "unknown device",
				args: []string{"--url", inv.URL, "--token", inv.Token, "isolated-device-show", "0b5e5b4e-5d5c-4d6a-9b1a-0c1d2e3f4a5b"},
				want: regexp.MustCompile(`^Error: isolated_device 0b5e5b4e-5d5c-4d6a-9b1a-0c1d2e3f4a5b not found \(HTTP 404 ResourceNotFoundError\)\n$`),
			},
			{
				name: "unknown device name",
				args: []string{"--url", inv.URL, "--token", inv.Token, "isolated-device-show", "no-such-id"},
				want: regexp.MustCompile(`^Error: isolated_device no-such-id not found \(HTTP 404 ResourceNotFoundError\)\n$`),
			},
			{
				name: "unknown host",
				args: []string{"--url", inv.URL, "--token", inv.Token, "isolated-device-list", "--host", "gpu-node-9"},
				want: regexp.MustCompile(`^Error: host "gpu-node-9" not found \(HTTP 404 ResourceNotFoundError\)\n$`),
			},
			{
				name: "no token",
				args: []string{"--url", inv.URL, "isolated-device-list"},
				want: regexp.MustCompile(`^Error: .+ \(HTTP 401 UnauthorizedError\)\n$`),
			},
			{
				name: "unreachable",
				args: []string{"--url", deadURL, "isolated-device-list"},
				want: regexp.MustCompile(`^Error: cannot reach the inventory at ` + regexp.QuoteMeta(deadURL) +
					`: .*connection refused \(set --url or MPS_INVENTORY_URL\)\n$`),
			},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := runMpsctl(t, tt.env, tt.args...)
				if r.Code != ExitRuntime {
					t.Errorf("exit %d, want %d", r.Code, ExitRuntime)
				}
				if !tt.want.MatchString(r.Stderr) {
					t.Errorf("stderr = %q, want %s", r.Stderr, tt.want)
				}
				if r.Stdout != "" {
					t.Errorf("stdout = %q, want nothing", r.Stdout)
				}
			})
		}
	})
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"unknown command", nil, []string{"isolated-device-lst"}, `unknown command "isolated-device-lst"`},
		{"unknown flag", nil, []string{"isolated-device-list", "--hots", "h"}, "unknown flag: --hots"},
		{"show without id", nil, []string{"isolated-device-show"}, "accepts 1 arg(s), received 0"},
		{"bad output", nil, []string{"-o", "yaml", "host-list"}, `invalid --output "yaml"`},
		{"negative limit", nil, []string{"isolated-device-list", "--limit", "-1"}, "invalid --limit -1"},
		{"negative offset", nil, []string{"host-list", "--offset", "-5"}, "invalid --offset -5"},
		{"bad url", nil, []string{"--url", "127.0.0.1:9330", "host-list"}, `invalid inventory URL "127.0.0.1:9330"`},
		{"bad url from env", map[string]string{EnvURL: "ftp://inventory"}, []string{"host-list"}, `invalid inventory URL "ftp://inventory"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runMpsctl(t, tt.env, tt.args...)
			if r.Code != ExitUsage {
				t.Errorf("exit %d, want %d (stderr %q)", r.Code, ExitUsage, r.Stderr)
			}
			if !strings.HasPrefix(r.Stderr, "Error: ") || !strings.Contains(r.Stderr, tt.want) {
				t.Errorf("stderr = %q, want an Error line with %q", r.Stderr, tt.want)
			}
			if strings.Contains(r.Stdout+r.Stderr, "Usage:") {
				t.Errorf("usage dumped:\n%s%s", r.Stdout, r.Stderr)
			}
		})
	}
}

func TestHelpDocumentsPrecedence(t *testing.T) {
	t.Parallel()
	r := runMpsctl(t, nil, "--help")
	if r.Code != ExitOK {
		t.Fatalf("exit %d", r.Code)
	}
	for _, s := range []string{"--url", EnvURL, EnvToken, EnvHostConf, "mps_inventory_url", "mps_inventory_token_file", DefaultURL,
		"isolated-device-list", "isolated-device-show", "host-list"} {
		if !strings.Contains(r.Stdout, s) {
			t.Errorf("--help does not mention %s:\n%s", s, r.Stdout)
		}
	}
}
