package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/alloctest"
	"yunion.io/x/mps-daemon/internal/testsupport/pgtest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/client"
)

// The concurrency proof against the real thing: two mps-inventory
// processes on one database (a SQLite file, then PostgreSQL), hundreds of
// concurrent attach and detach requests spread over both (see
// internal/testsupport/alloctest for what is checked).
func TestConcurrentAttachTwoInventories(t *testing.T) {
	backends := []struct {
		name string
		db   func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return filepath.Join(t.TempDir(), "inventory.db") }},
		{"postgres", func(t *testing.T) string { return pgtest.DSN(t) }},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			db, dir := b.db(t), t.TempDir()
			tokenFile := filepath.Join(dir, "admin.token")
			// One after the other: the first creates the admin token file,
			// the second finds it valid and keeps it.
			var urls []string
			for i := range 2 {
				addrFile := filepath.Join(dir, fmt.Sprintf("addr-%d", i))
				p := start(t, "mps-inventory", "--listen", "127.0.0.1:0", "--db", db,
					"--admin-token-file", tokenFile, "--address-file", addrFile)
				var addr string
				eventually(t, "inventory address file", func() (bool, string) {
					b, err := os.ReadFile(addrFile)
					addr = strings.TrimSpace(string(b))
					return err == nil && addr != "", p.Output()
				})
				urls = append(urls, "http://"+addr)
			}
			tok, err := os.ReadFile(tokenFile)
			if err != nil {
				t.Fatal(err)
			}
			token := strings.TrimSpace(string(tok))

			c := client.New(client.Options{URL: urls[0], Token: token})
			h, err := c.EnsureHost(t.Context(), "gpu-1")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.SyncDevices(t.Context(), h.ID, h100Slices(4, 8)); err != nil {
				t.Fatal(err)
			}
			list, err := c.ListIsolatedDevices(t.Context(), client.ListOptions{HostID: h.ID, Limit: 100})
			if err != nil || list.Total != 32 {
				t.Fatalf("seeded %v devices, %v; want 32", list, err)
			}
			final := func() (map[string]string, error) {
				l, err := client.New(client.Options{URL: urls[1], Token: token}).
					ListIsolatedDevices(t.Context(), client.ListOptions{Limit: 1000})
				if err != nil {
					return nil, err
				}
				m := map[string]string{}
				for _, d := range l.IsolatedDevices {
					m[d.ID] = d.GuestID
				}
				return m, nil
			}
			alloctest.Run(t, alloctest.Load{
				URLs: urls, Token: token, Devices: list.IsolatedDevices, Host: "gpu-1", Model: "NVIDIA H100 80GB HBM3",
				Workers: 24, Rounds: 16,
			}, final)
		})
	}
}

// h100Slices is what an agent syncs for gpus H100s split in n, GPU i on
// NUMA node i/2.
func h100Slices(gpus, n int) []api.IsolatedDevice {
	var out []api.IsolatedDevice
	for g := range gpus {
		for i := range n {
			out = append(out, api.IsolatedDevice{
				Name: fmt.Sprintf("mps-%02x-%d", 0x1a+g, i), Model: "NVIDIA H100 80GB HBM3",
				Addr: fmt.Sprintf("%02x:00.0-%d", 0x1a+g, i), VendorDeviceID: "10de:2330",
				DevicePath: fmt.Sprintf("GPU-%d", g), NumaNode: g / 2, Index: -1, DeviceMinor: -1,
				MPSMemoryLimit: 81559 / n, MPSMemoryTotal: 81559, MPSThreadPercentage: 100 / n,
			})
		}
	}
	return out
}
