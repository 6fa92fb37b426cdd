package mpsctl

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

const h100 = "NVIDIA H100 80GB HBM3"

// allocInventory is a real inventory over a store of any backend (tests run
// in storetest.ForEachBackend), with an admin token and host "gpu-1":
// two H100s (GPU-0 on NUMA node 0, GPU-1 on node 1) of two slices each.
type allocInventory struct {
	st   *store.Store
	args []string // --url and --token
	devs []api.IsolatedDevice
}

func newAllocInventory(t *testing.T, st *store.Store) *allocInventory {
	t.Helper()
	ctx := t.Context()
	url, token := serve(t, st)
	h, err := st.CreateHost(ctx, api.Host{Name: "gpu-1"})
	if err != nil {
		t.Fatal(err)
	}
	inv := &allocInventory{st: st, args: []string{"--url", url, "--token", token}}
	for g := range 2 {
		for i := range 2 {
			d, err := st.CreateDevice(ctx, api.IsolatedDevice{
				HostID: h.ID, DevType: api.DevTypeNvidiaMPS, Model: h100,
				Addr: fmt.Sprintf("%02x:00.0-%d", 0x1a+g, i), VendorDeviceID: "10de:2330",
				DevicePath: fmt.Sprintf("GPU-%d", g), NumaNode: g, Index: -1, DeviceMinor: -1,
				MPSMemoryLimit: 40779, MPSMemoryTotal: 81559, MPSThreadPercentage: 50,
			})
			if err != nil {
				t.Fatal(err)
			}
			inv.devs = append(inv.devs, d)
		}
	}
	return inv
}

func (inv *allocInventory) run(t *testing.T, args ...string) result {
	t.Helper()
	return runMpsctl(t, nil, append(slices.Clone(inv.args), args...)...)
}

func TestServerAttachDetachCommands(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		t.Parallel()
		inv := newAllocInventory(t, open())
		d0, d3 := inv.devs[0].ID, inv.devs[3].ID
		// Steps run in order on one inventory.
		steps := []struct {
			name  string
			args  []string
			code  int
			addrs []string // rows printed, for exit 0
			guest string   // Guest_id of the rows printed
			err   string   // the one line on stderr, for exit 1 (or its start, for exit 2)
		}{
			{name: "by id", args: []string{"server-attach-isolated-device", "pod-a", d0}, addrs: []string{"1a:00.0-0"}, guest: "pod-a"},
			{name: "by model", args: []string{"server-attach-isolated-device", "pod-b", "--model", h100, "--host", "gpu-1", "--count", "2"},
				addrs: []string{"1b:00.0-0", "1a:00.0-1"}, guest: "pod-b"},
			{name: "held by another server", args: []string{"server-attach-isolated-device", "pod-c", d0}, code: ExitRuntime,
				err: "Error: " + api.MsgDeviceUsedByServer + " pod-a (HTTP 400 BadRequestError)"},
			{name: "more than free", args: []string{"server-attach-isolated-device", "pod-c", "--model", h100, "--host", "gpu-1", "--count", "2", "--numa-node", "1"},
				code: ExitRuntime, err: `Error: need 2 free NVIDIA_MPS "NVIDIA H100 80GB HBM3" devices on host gpu-1 NUMA node 1, 1 free (HTTP 400 InsufficientResourceError)`},
			{name: "unknown host", args: []string{"server-attach-isolated-device", "pod-c", "--model", h100, "--host", "gpu-9"},
				code: ExitRuntime, err: `Error: host "gpu-9" not found (HTTP 404 ResourceNotFoundError)`},
			{name: "bad server id", args: []string{"server-attach-isolated-device", "pod c", d3},
				code: ExitRuntime, err: `Error: guest: "pod c" is not a guest id (1 to 128 characters of A-Z a-z 0-9 . _ : -) (HTTP 400 InputParameterError)`},
			{name: "by model on a NUMA node", args: []string{"server-attach-isolated-device", "pod-c", "--model", h100, "--host", "gpu-1", "--numa-node", "1"},
				addrs: []string{"1b:00.0-1"}, guest: "pod-c"},

			{name: "detach another server's device", args: []string{"server-detach-isolated-device", "pod-b", d0}, code: ExitRuntime,
				err: "Error: " + api.MsgDeviceUsedByServer + " pod-a, not by pod-b (HTTP 400 BadRequestError)"},
			{name: "detach", args: []string{"server-detach-isolated-device", "pod-a", d0}, addrs: []string{"1a:00.0-0"}},
			{name: "detach a free device", args: []string{"server-detach-isolated-device", "pod-a", d0}, addrs: []string{}},
			{name: "detach all", args: []string{"server-detach-isolated-device", "pod-b", "--all"}, addrs: []string{"1a:00.0-1", "1b:00.0-0"}},

			{name: "neither DEVICE nor --model", args: []string{"server-attach-isolated-device", "pod-a"}, code: ExitUsage, err: "Error: give DEVICE, or --model and --host"},
			{name: "DEVICE and --model", args: []string{"server-attach-isolated-device", "pod-a", d0, "--model", h100}, code: ExitUsage, err: "Error: --model: give either"},
			{name: "--model without --host", args: []string{"server-attach-isolated-device", "pod-a", "--model", h100}, code: ExitUsage, err: "Error: --host is required"},
			{name: "zero count", args: []string{"server-attach-isolated-device", "pod-a", "--model", h100, "--host", "gpu-1", "--count", "0"}, code: ExitUsage, err: "Error: invalid --count 0"},
			{name: "bad numa node", args: []string{"server-attach-isolated-device", "pod-a", "--model", h100, "--host", "gpu-1", "--numa-node", "-2"}, code: ExitUsage, err: "Error: invalid --numa-node -2"},
			{name: "detach neither", args: []string{"server-detach-isolated-device", "pod-a"}, code: ExitUsage, err: "Error: give either DEVICE or --all"},
			{name: "detach both", args: []string{"server-detach-isolated-device", "pod-a", d0, "--all"}, code: ExitUsage, err: "Error: give either DEVICE or --all"},
			{name: "no server", args: []string{"server-detach-isolated-device"}, code: ExitUsage, err: "Error: accepts between 1 and 2 arg(s)"},
		}
		for _, st := range steps {
			t.Run(st.name, func(t *testing.T) {
				r := inv.run(t, st.args...)
				if r.Code != st.code {
					t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", r.Code, st.code, r.Stdout, r.Stderr)
				}
				switch st.code {
				case ExitRuntime:
					if r.Stderr != st.err+"\n" || r.Stdout != "" {
						t.Errorf("stderr %q, want the one line %q (stdout %q)", r.Stderr, st.err, r.Stdout)
					}
					return
				case ExitUsage:
					if !strings.HasPrefix(r.Stderr, st.err) {
						t.Errorf("stderr %q, want it to start with %q", r.Stderr, st.err)
					}
					return
				}
				if r.Stderr != "" {
					t.Errorf("stderr %q", r.Stderr)
				}
				if len(st.addrs) == 0 {
					if strings.Count(r.Stdout, "\n") != 3 {
						t.Errorf("want a table of no rows:\n%s", r.Stdout)
					}
					return
				}
				var addrs []string
				for _, row := range tableRows(t, r.Stdout) {
					addrs = append(addrs, row["Addr"])
					if row["Guest_id"] != st.guest {
						t.Errorf("row %s: Guest_id %q, want %q", row["Addr"], row["Guest_id"], st.guest)
					}
				}
				if !slices.Equal(addrs, st.addrs) {
					t.Errorf("rows %q, want %q\n%s", addrs, st.addrs, r.Stdout)
				}
				if strings.Contains(r.Stdout, "*** Total") {
					t.Errorf("a paging footer under changed rows:\n%s", r.Stdout)
				}
			})
		}
		want := map[string]string{"1a:00.0-0": "", "1a:00.0-1": "", "1b:00.0-0": "", "1b:00.0-1": "pod-c"}
		if got := storetest.Guests(t, inv.st); !maps.Equal(got, want) {
			t.Errorf("final state %v, want %v", got, want)
		}
	})
}

func TestIsolatedDevicePurgeCommand(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		t.Parallel()
		inv := newAllocInventory(t, open())
		held, free := inv.devs[0].ID, inv.devs[1].ID
		if r := inv.run(t, "server-attach-isolated-device", "pod-a", held); r.Code != ExitOK {
			t.Fatalf("attach: %+v", r)
		}

		r := inv.run(t, "isolated-device-purge", held)
		if r.Code != ExitRuntime || r.Stderr != "Error: "+api.MsgDeviceUsedByServer+" (HTTP 400 BadRequestError)\n" {
			t.Errorf("purge of a held device: exit %d, stderr %q", r.Code, r.Stderr)
		}
		r = inv.run(t, "isolated-device-purge", held, "--force")
		if r.Code != ExitOK || !strings.HasSuffix(r.Stdout, "Detached from server pod-a.\n") {
			t.Fatalf("force purge: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
		}
		if rows := tableRows(t, strings.TrimSuffix(r.Stdout, "Detached from server pod-a.\n")); len(rows) != 1 || rows[0]["Guest_id"] != "pod-a" {
			t.Errorf("force purge printed %v; want the device as it was, held by pod-a", rows)
		}

		r = inv.run(t, "-o", "json", "isolated-device-purge", free, "--force")
		var body map[string]json.RawMessage
		if err := json.Unmarshal([]byte(r.Stdout), &body); err != nil || r.Code != ExitOK {
			t.Fatalf("purge -o json: exit %d, %v\n%s", r.Code, err, r.Stdout)
		}
		if _, ok := body["detached_guest"]; ok || body["isolated_device"] == nil {
			t.Errorf("purge of a free device -o json: %s; want isolated_device and no detached_guest", r.Stdout)
		}
		if got := storetest.Guests(t, inv.st); len(got) != 2 {
			t.Errorf("devices left: %v, want 2", got)
		}
	})
}

// Every command mpsctl has prints JSON with -o json. A new command without
// an entry here fails the test, so it cannot be added without deciding its
// JSON.
func TestEveryCommandHonoursJSON(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		t.Parallel()
		inv := newAllocInventory(t, open())
		d := inv.devs
		args := map[string][]string{
			"isolated-device-list":          {"--server", "pod-a"},
			"isolated-device-show":          {d[2].ID},
			"host-list":                     nil,
			"server-attach-isolated-device": {"pod-a", d[0].ID},
			"server-detach-isolated-device": {"pod-a", "--all"},
			"isolated-device-purge":         {d[3].ID},
		}
		// The order matters for the state: attach before the list and detach.
		order := []string{"server-attach-isolated-device", "isolated-device-list", "isolated-device-show", "host-list",
			"server-detach-isolated-device", "isolated-device-purge"}
		a := &app{env: func(string) string { return "" }}
		for _, c := range a.rootCommand().Commands() {
			if c.Hidden || c.Name() == "help" {
				continue
			}
			if _, ok := args[c.Name()]; !ok {
				t.Errorf("command %s has no entry in this test: add one", c.Name())
			}
		}
		for _, name := range order {
			t.Run(name, func(t *testing.T) {
				r := inv.run(t, append([]string{"-o", "json", name}, args[name]...)...)
				if r.Code != ExitOK || r.Stderr != "" {
					t.Fatalf("exit %d, stderr %q", r.Code, r.Stderr)
				}
				var v map[string]json.RawMessage
				if err := json.Unmarshal([]byte(r.Stdout), &v); err != nil || len(v) == 0 {
					t.Errorf("stdout is not a JSON object: %v\n%s", err, r.Stdout)
				}
				if name == "isolated-device-list" || strings.HasPrefix(name, "server-") {
					var l struct {
						IsolatedDevices []api.IsolatedDevice `json:"isolated_devices"`
					}
					if err := json.Unmarshal([]byte(r.Stdout), &l); err != nil || len(l.IsolatedDevices) != 1 || l.IsolatedDevices[0].ID != d[0].ID {
						t.Errorf("want device %s in isolated_devices: %v\n%s", d[0].ID, err, r.Stdout)
					}
				}
			})
		}
	})
}

func TestIsolatedDeviceListStateFilters(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		t.Parallel()
		inv := newAllocInventory(t, open())
		yes := true
		if _, err := inv.st.UpdateDevice(t.Context(), inv.devs[1].ID, store.DeviceUpdate{Unhealthy: &yes}); err != nil {
			t.Fatal(err)
		}
		if _, err := inv.st.UpdateDevice(t.Context(), inv.devs[2].ID, store.DeviceUpdate{PendingRemoval: &yes}); err != nil {
			t.Fatal(err)
		}
		for flag, want := range map[string]string{"--unhealthy": "1a:00.0-1", "--pending-removal": "1b:00.0-0"} {
			r := inv.run(t, "isolated-device-list", flag)
			rows := tableRows(t, r.Stdout)
			if r.Code != ExitOK || len(rows) != 1 || rows[0]["Addr"] != want {
				t.Errorf("%s: exit %d, rows %v; want only %s\n%s", flag, r.Code, rows, want, r.Stderr)
			}
		}
	})
}

// The CDI name the host registers is what an operator hands a container
// runtime: attach answers show it, the plain list keeps Cloudpods' layout,
// --details adds it.
func TestCDINameShownOnAttachAndWithDetails(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		inv := newAllocInventory(t, open())
		name := "yunion.io/mps-gpu=GPU-0::0"
		cdi := name
		if _, err := inv.st.UpdateDevice(t.Context(), inv.devs[0].ID, store.DeviceUpdate{CDIName: &cdi}); err != nil {
			t.Fatal(err)
		}
		r := inv.run(t, "server-attach-isolated-device", "pod-a", inv.devs[0].ID)
		if r.Code != 0 || !strings.Contains(r.Stdout, "CDI_name") || !strings.Contains(r.Stdout, name) {
			t.Errorf("attach answer should carry the CDI name:\n%s%s", r.Stdout, r.Stderr)
		}
		if r := inv.run(t, "isolated-device-list"); strings.Contains(r.Stdout, "CDI_name") {
			t.Errorf("the plain list keeps Cloudpods' columns:\n%s", r.Stdout)
		}
		if r := inv.run(t, "isolated-device-list", "--details"); !strings.Contains(r.Stdout, name) {
			t.Errorf("--details shows the CDI name:\n%s", r.Stdout)
		}
	})
}
