package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/cloudpods"
)

// The daemon against a replay of the real region it joined (Cloudpods
// master, tests/cloudpods/recordings/e2e; a real one under make
// test-cloudpods, which records them again): host.conf holds only
// Cloudpods' keys (and this test's paths), the simulated 8 x H100 host's
// first two GPUs have 4 and 2 slices. The replay fails the test on any
// request the daemon sends that the region did not get then, or one that
// differs from it in a field; and on any write the daemon no longer makes.

// replayedHost is the daemon of a replay: the recording's daemon synced on
// changes only (mps_sync_interval long), so this one does too.
func replayedHost(t *testing.T, opts cloudpods.Options, password string) (*cloudpods.Cloud, *cpHost, *proc) {
	t.Helper()
	c := cloudpods.NewOrReplay(t, "e2e", opts)
	if password == "" {
		password = c.Password
	}
	h := newCPHostSyncing(t, c, c.User, password, c.HostMAC, "1h")
	// The recording's host had no pci.ids: the driver's model name.
	d := startEnv(t, []string{"PCIDB_PATH=/nonexistent/pci.ids"}, "mps-daemon", "--config", h.hostConf, "--simulate", "8xH100")
	return c, h, d
}

// TestDaemonJoinsTheRecordedRegion: registered as two GPU rows (4 and 2
// slices), listed by climc as the region listed them, resized in place,
// a GPU removed purged.
func TestDaemonJoinsTheRecordedRegion(t *testing.T) {
	t.Parallel()
	c, h, d := replayedHost(t, cloudpods.Options{HostMAC: "02:fc:00:00:00:01"}, "")
	eventually(t, "registered", func() (bool, string) {
		st := h.status(t)
		return st.Ready && st.HostID == c.HostID && len(st.Devices) == 6, fmt.Sprintf("%+v", st)
	})
	if strings.Contains(d.Output(), c.Password) {
		t.Fatal("the daemon logged its password")
	}
	// What climc read then (its --details list): the daemon's two GPUs,
	// in the region's GPU-row model, 6 slices between them.
	var list struct {
		Devices []struct {
			DevType     string `json:"dev_type"`
			SharingMode string `json:"sharing_mode"`
			Addr        string `json:"addr"`
			VirtualNum  int    `json:"virtual_num"`
			HostID      string `json:"host_id"`
		} `json:"isolated_devices"`
	}
	if _, err := cloudpods.Request(context.Background(), http.MethodGet, c.RegionURL+"/isolated_devices?details=true&gpu=false&limit=20&offset=0&summary_stats=false&unused=false",
		climcLogin(t, c), nil, &list); err != nil {
		t.Fatal(err)
	}
	slices := 0
	for _, r := range list.Devices {
		if r.DevType != "GPU" || r.SharingMode != "MPS" || r.HostID != c.HostID {
			t.Errorf("row %+v: want a GPU row of sharing mode MPS on the host", r)
		}
		slices += r.VirtualNum
	}
	if len(list.Devices) != 2 || slices != 6 {
		t.Fatalf("climc's list: %d rows, %d slices; want 2 GPU rows, 6 slices: %+v", len(list.Devices), slices, list.Devices)
	}

	h.writeDevices(t, 3) // GPU 0 from 4 to 3 slices
	eventually(t, "resized", func() (bool, string) {
		st := h.status(t)
		return st.Ready && len(st.Devices) == 5, fmt.Sprintf("%+v", st)
	})
	if err := os.WriteFile(h.devices, []byte("devices:\n- path: /dev/dri/renderD128\n  type: NVIDIA_MPS\n  virtual_number: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the GPU removed", func() (bool, string) {
		st := h.status(t)
		return st.Ready && len(st.Devices) == 3, fmt.Sprintf("%+v", st)
	})
	if err := d.Stop(t); err != nil {
		t.Fatalf("daemon exited with %v", err)
	}
}

// TestDaemonWaitsForTheRecordedHostRecord: the region has no host record
// for the daemon's MAC; the daemon says so and retries.
func TestDaemonWaitsForTheRecordedHostRecord(t *testing.T) {
	t.Parallel()
	c := cloudpods.NewOrReplay(t, "e2e", cloudpods.Options{})
	const mac = "02:fc:00:00:00:01"
	h := newCPHostSyncing(t, c, c.User, c.Password, mac, "1h")
	d := startEnv(t, []string{"PCIDB_PATH=/nonexistent/pci.ids"}, "mps-daemon", "--config", h.hostConf, "--simulate", "8xH100")
	eventually(t, "no host record reported", func() (bool, string) {
		st := h.status(t)
		return strings.Contains(st.LastError, "no host record") && strings.Contains(st.LastError, mac), st.LastError
	})
	if d.Exited() {
		t.Fatalf("the daemon exited:\n%s", d.Output())
	}
}

// TestDaemonWithAWrongPasswordAgainstTheRecordedKeystone: keystone refused
// the password (401); the daemon says so, retries, never logs it.
func TestDaemonWithAWrongPasswordAgainstTheRecordedKeystone(t *testing.T) {
	t.Parallel()
	const wrong = "Not-the-password-9"
	c, h, d := replayedHost(t, cloudpods.Options{}, wrong)
	eventually(t, "the refusal reported", func() (bool, string) {
		st := h.status(t)
		return strings.Contains(st.LastError, "keystone refused the credentials"), st.LastError
	})
	if d.Exited() || strings.Contains(d.Output(), wrong) || strings.Contains(d.Output(), c.Password) {
		t.Fatalf("the daemon exited or logged a password:\n%s", d.Output())
	}
}

// climcLogin logs in as climc does (its login says it is a CLI) and
// returns the token.
func climcLogin(t *testing.T, c *cloudpods.Cloud) string {
	t.Helper()
	body := map[string]any{"auth": map[string]any{
		"context": map[string]any{"source": "cli"},
		"identity": map[string]any{"methods": []string{"password"}, "password": map[string]any{
			"user": map[string]any{"name": c.User, "domain": map[string]any{"name": c.Domain}, "password": c.Password}}},
		"scope": map[string]any{"project": map[string]any{"name": c.Project, "domain": map[string]any{"name": c.Domain}}},
	}}
	hdr, err := cloudpods.Request(context.Background(), http.MethodPost, c.AuthURL+"/auth/tokens", "", body, nil)
	if err != nil {
		t.Fatal(err)
	}
	return hdr.Get("X-Subject-Token")
}

// replayedClimcRows is climcRows in a replay: the request climc sent for
// isolated-device-list --host, its answer's rows by climc's column names.
func replayedClimcRows(t *testing.T, c *cloudpods.Cloud, hostID string) ([]map[string]string, string) {
	t.Helper()
	var list struct {
		Devices []map[string]any `json:"isolated_devices"`
	}
	if _, err := cloudpods.Request(context.Background(), http.MethodGet, c.RegionURL+"/isolated_devices?details=false&gpu=false&host="+hostID+
		"&limit=20&offset=0&summary_stats=false&unused=false", climcLogin(t, c), nil, &list); err != nil {
		t.Fatal(err)
	}
	columns := map[string]string{"ID": "id", "Dev_type": "dev_type", "Sharing_mode": "sharing_mode", "Model": "model", "Addr": "addr",
		"Vendor_device_id": "vendor_device_id", "Host_id": "host_id", "numa_node": "numa_node", "Device_path": "device_path",
		"PCIE_Info": "pcie_info", "Index": "index", "Device_minor": "device_minor"}
	var rows []map[string]string
	for _, d := range list.Devices {
		row := map[string]string{}
		for col, field := range columns {
			v, ok := d[field]
			if !ok {
				continue
			}
			if s, isString := v.(string); isString {
				row[col] = s
			} else {
				b, _ := json.Marshal(v)
				row[col] = string(b)
			}
		}
		rows = append(rows, row)
	}
	out, _ := json.Marshal(list.Devices)
	return rows, string(out)
}
