package mpsctl

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/client"
	"yunion.io/x/mps-daemon/pkg/inventory/server"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

const (
	h100UUID = "GPU-0b6c3e0e-5a1f-4d2b-9c3e-1a2b3c4d5e6f"
	guestID  = "e1f2a3b4-c5d6-4e7f-8091-a2b3c4d5e6f7"
)

// inventory is a real mps-inventory (HTTP server over a database) seeded
// with two hosts:
//
//	gpu-node-1: 4 MPS slices of a Tesla P40, slice 2 held by guestID
//	gpu-node-2: 3 MPS slices of an H100, and one non-MPS T4
type inventory struct {
	URL string
	// Token is an admin token of this inventory.
	Token string
	Host1 api.Host
	Host2 api.Host
	// Devices in creation order, as the server answered.
	Devices []api.IsolatedDevice
}

// serve starts the API over st on loopback, until t ends, and makes an
// admin token for it.
func serve(t *testing.T, st *store.Store) (url, token string) {
	t.Helper()
	token, _, err := st.CreateToken(t.Context(), store.NewToken{Name: "mpsctl tests", Role: store.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(server.New(st, server.Options{}, nil))
	t.Cleanup(srv.Close)
	return srv.URL, token
}

// newInventory serves st (a new, empty database of either backend: see
// storetest.ForEachBackend) and seeds it.
func newInventory(t *testing.T, st *store.Store) *inventory {
	t.Helper()
	ctx := t.Context()
	inv := &inventory{}
	inv.URL, inv.Token = serve(t, st)
	c := client.New(client.Options{URL: inv.URL, Token: inv.Token, Retries: -1})
	var err error
	if inv.Host1, err = c.CreateHost(ctx, api.Host{Name: "gpu-node-1", AccessIP: "10.0.0.11"}); err != nil {
		t.Fatal(err)
	}
	if inv.Host2, err = c.CreateHost(ctx, api.Host{Name: "gpu-node-2"}); err != nil {
		t.Fatal(err)
	}

	var devs []api.IsolatedDevice
	for i, d := range p40Slices() {
		d.ID, d.HostID = "", inv.Host1.ID
		if i == 2 {
			d.GuestID = guestID
		}
		devs = append(devs, d)
	}
	for i := range 3 {
		devs = append(devs, api.IsolatedDevice{
			HostID: inv.Host2.ID, DevType: api.DevTypeNvidiaMPS, Model: "NVIDIA H100 80GB HBM3",
			Addr: fmt.Sprintf("1a:00.0-%d", i), VendorDeviceID: "10de:2330", DevicePath: h100UUID,
			NumaNode: 0, Index: -1, DeviceMinor: -1,
			PCIEInfo:       &api.PCIEInfo{LaneWidth: 16, Throughput: "63.01 GB/s", TransferRatePerLane: "32GT/s", Version: "5.0"},
			MPSMemoryLimit: 81559 / 3, MPSMemoryTotal: 81559, MPSThreadPercentage: 33,
		})
	}
	devs = append(devs, api.IsolatedDevice{
		HostID: inv.Host2.ID, DevType: "GPU-HPC", Model: "Tesla T4", Addr: "3b:00.0",
		VendorDeviceID: "10de:1eb8", NumaNode: 1, Index: 0, DeviceMinor: 1,
		RenderPath: "/dev/dri/renderD129",
	})
	for _, d := range devs {
		got, err := c.CreateIsolatedDevice(ctx, d)
		if err != nil {
			t.Fatalf("creating %s: %v", d.Addr, err)
		}
		inv.Devices = append(inv.Devices, got)
	}
	return inv
}

// result is what one mpsctl run printed.
type result struct {
	Stdout, Stderr string
	Code           int
}

// runMpsctl runs mpsctl in-process. Unless env names one, host.conf is a path
// in an empty directory, so the machine's /etc/yunion/host.conf never leaks
// into a test.
func runMpsctl(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	e := map[string]string{EnvHostConf: filepath.Join(t.TempDir(), "absent-host.conf")}
	for k, v := range env {
		e[k] = v
	}
	var out, errOut bytes.Buffer
	code := Run(context.Background(), args, envMap(e), &out, &errOut)
	return result{Stdout: out.String(), Stderr: errOut.String(), Code: code}
}

// tableRows returns the body rows of a list table as cells, by header.
func tableRows(t *testing.T, table string) []map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	if len(lines) < 4 {
		t.Fatalf("not a table:\n%s", table)
	}
	headers := headerCells(table)
	var rows []map[string]string
	for _, l := range lines[3:] {
		if !strings.HasPrefix(l, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		row := map[string]string{}
		for i, h := range headers {
			row[h] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, row)
	}
	return rows
}

// footer is the last line of a list table.
func footer(table string) string {
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	return lines[len(lines)-1]
}
