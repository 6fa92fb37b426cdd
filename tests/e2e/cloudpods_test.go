package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/cloudpods"
)

// The simulated 8 x H100 host's first two GPUs, by render node, as an
// operator configures them on a Cloudpods host (render nodes are the only
// paths Cloudpods' own host agent reads from this file).
const cloudpodsDevicesYAML = `devices:
- path: /dev/dri/renderD128
  type: NVIDIA_MPS
  virtual_number: %d
- path: /dev/dri/renderD129
  type: NVIDIA_MPS
  virtual_number: 2
`

// outageRetries is how many failed reconciles TestCloudpodsRegion waits
// for while the region is away.
const outageRetries = 10

// cpHost is one daemon's host beside a real Cloudpods region.
type cpHost struct {
	dir, hostConf, devices, listen string
	cloud                          *cloudpods.Cloud
}

// daemonUser makes the keystone user the daemon authenticates as (admin of
// project system, as Cloudpods' own services' user is), so a test can revoke
// its tokens without touching the test's own.
func daemonUser(t *testing.T, c *cloudpods.Cloud, name, password string) {
	t.Helper()
	if c.Replaying() { // climc's user-create and project-add-user, as recorded
		c.ApplyRecorded(t, 2)
		c.SetPassword(name, password)
		return
	}
	ctx := context.Background()
	if _, errOut, err := c.RunClimc(ctx, "user-create", "--password", password, "--enabled", name); err != nil {
		t.Fatalf("climc user-create: %v\n%s", err, errOut)
	}
	if _, errOut, err := c.RunClimc(ctx, "project-add-user", c.Project, name, "admin"); err != nil {
		t.Fatalf("climc project-add-user: %v\n%s", err, errOut)
	}
}

func newCPHost(t *testing.T, c *cloudpods.Cloud, user, password, mac string) *cpHost {
	t.Helper()
	return newCPHostSyncing(t, c, user, password, mac, "1s")
}

// newCPHostSyncing is newCPHost with the sync interval given.
func newCPHostSyncing(t *testing.T, c *cloudpods.Cloud, user, password, mac, sync string) *cpHost {
	t.Helper()
	dir, err := os.MkdirTemp("", "e2ecp") // short: MPS socket paths
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	h := &cpHost{dir: dir, hostConf: filepath.Join(dir, "host.conf"), devices: filepath.Join(dir, "devices.yml"), listen: freePort(t), cloud: c}
	// Cloudpods' keys as its host agent's host.conf has them (aliases and
	// - included), no mps_inventory_url: the region is the inventory.
	conf := fmt.Sprintf(`region: %s
auth_uri: %s
admin-user: %s
admin_password: %q
admin_tenant_name: %s
session_endpoint_type: internal
host_type: container
enable_cuda_mps: true
container_device_config_file: %s
cuda_mps_pipe_directory: %s/pipe
cuda_mps_log_directory: %s/log
mps_region_host_mac: %s
mps_listen_address: %s
mps_state_directory: %s/state
mps_cdi_directory: %s/cdi
mps_sync_interval: %s
mps_inventory_timeout: 5s
`, c.RegionName, c.AuthURL, user, password, c.Project, h.devices, dir, dir, mac, h.listen, dir, dir, sync)
	if err := os.WriteFile(h.hostConf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	h.writeDevices(t, 4)
	return h
}

func (h *cpHost) writeDevices(t *testing.T, n int) {
	t.Helper()
	tmp := h.devices + ".tmp"
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf(cloudpodsDevicesYAML, n)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, h.devices); err != nil {
		t.Fatal(err)
	}
}

func (h *cpHost) start(t *testing.T) *proc {
	t.Helper()
	return start(t, "mps-daemon", "--config", h.hostConf, "--simulate", "8xH100")
}

type cpStatus struct {
	Ready              bool   `json:"ready"`
	HostID             string `json:"host_id"`
	LastError          string `json:"last_error"`
	InventoryReachable bool   `json:"inventory_reachable"`
	GPUs               []struct {
		UUID          string `json:"uuid"`
		Healthy       bool   `json:"healthy"`
		PipeDirectory string `json:"pipe_directory"`
	} `json:"gpus"`
	Devices []struct {
		Name           string `json:"name"`
		Guest          string `json:"guest"`
		PendingRemoval bool   `json:"pending_removal"`
	} `json:"devices"`
}

func (h *cpHost) status(t *testing.T) cpStatus {
	t.Helper()
	code, body := get("http://" + h.listen + "/status")
	var st cpStatus
	if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil {
		return cpStatus{LastError: fmt.Sprintf("/status: %d %s", code, body)}
	}
	return st
}

// climcRows runs the REAL climc isolated-device-list for the host and
// returns its table as header -> value maps, one per row, and the output.
// In a replay it sends what climc sent then and reads the columns from the
// answer (replayedClimcRows).
func climcRows(t *testing.T, c *cloudpods.Cloud, hostID string) ([]map[string]string, string) {
	t.Helper()
	if c.Replaying() {
		return replayedClimcRows(t, c, hostID)
	}
	out, errOut, err := c.RunClimc(context.Background(), "isolated-device-list", "--host", hostID)
	if err != nil {
		t.Fatalf("climc isolated-device-list: %v\n%s", err, errOut)
	}
	var header []string
	var rows []map[string]string
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if header == nil {
			header = cells
			continue
		}
		row := map[string]string{}
		for i, h := range header {
			if i < len(cells) {
				row[h] = cells[i]
			}
		}
		rows = append(rows, row)
	}
	return rows, out
}

// gpuRows indexes climc's rows by addr and fails on a duplicate.
func gpuRows(t *testing.T, rows []map[string]string, out string) map[string]map[string]string {
	t.Helper()
	m := map[string]map[string]string{}
	for _, r := range rows {
		if _, dup := m[r["Addr"]]; dup {
			t.Fatalf("two rows at %s:\n%s", r["Addr"], out)
		}
		m[r["Addr"]] = r
	}
	return m
}

// TestCloudpodsRegion is the seed's runbook against Cloudpods' real keystone,
// region and climc: the daemon waits for the host record the host agent
// keeps, registers its GPUs in the region's model, the real climc lists
// them; a resize, a restart and a kill -9 leave no duplicates; a held GPU
// survives a shrink; a revoked token and a minute without the region are
// survived.
//
// The outage is counted in the daemon's retries, not in seconds: a
// minute of it (the runbook's) is about 50 retries at this host.conf's
// interval, each one the same failed reconcile; outageRetries of them
// show that the daemon keeps retrying and MPS stays up.
//
// Without Cloudpods' binaries (make test, CI) it runs against the replay of
// its recording (tests/cloudpods/recordings/e2e): what climc did is applied
// or sent as recorded, the outage closes every connection, and the daemon
// must send what it sent the real region.
func TestCloudpodsRegion(t *testing.T) {
	t.Parallel()
	c := cloudpods.NewOrReplay(t, "e2e", cloudpods.Options{})
	ctx := context.Background()
	const user, password = "mpsd", "Mpsd-e2e-pass-1"
	daemonUser(t, c, user, password)
	mac := "02:00:00:00:e2:01"
	h := newCPHost(t, c, user, password, mac)
	d := h.start(t)

	// No host record for this machine yet: said in /status, retried.
	eventually(t, "no host record reported", func() (bool, string) {
		st := h.status(t)
		return strings.Contains(st.LastError, "no host record") && strings.Contains(st.LastError, mac), st.LastError
	})
	if strings.Contains(d.Output(), password) {
		t.Fatal("the daemon logged its password")
	}
	hostID, err := c.CreateHost(ctx, "gpu-e2e", mac, "127.0.0.61") // what the host agent does at its start
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "registered", func() (bool, string) {
		st := h.status(t)
		return st.Ready && st.HostID == hostID, fmt.Sprintf("%+v", st)
	})

	// The real climc shows the GPUs with the seed's columns and values.
	rows, out := climcRows(t, c, hostID)
	byAddr := gpuRows(t, rows, out)
	for _, col := range []string{"ID", "Dev_type", "Model", "Addr", "Vendor_device_id", "Host_id", "numa_node", "Device_path", "PCIE_Info", "Index", "Device_minor"} {
		if _, ok := rows[0][col]; !ok {
			t.Fatalf("climc table lacks column %s:\n%s", col, out)
		}
	}
	st := h.status(t)
	for i, addr := range []string{"18:00.0", "2a:00.0"} {
		r, ok := byAddr[addr]
		if !ok {
			t.Fatalf("no row at %s:\n%s", addr, out)
		}
		want := map[string]string{"Dev_type": "GPU", "Sharing_mode": "MPS", "Vendor_device_id": "10de:2330", "Host_id": hostID,
			"Device_path": st.GPUs[i].UUID, "Index": "-1", "Device_minor": "-1",
			"PCIE_Info": `{"lane_width":16,"throughput":"63.01 GB/s","transfer_rate_per_lane":"32GT/s","version":"5.0"}`}
		for k, v := range want {
			if r[k] != v {
				t.Errorf("%s %s = %q, want %q\n%s", addr, k, r[k], v, out)
			}
		}
	}
	devs := c.HostDevices(t, hostID)
	if devs["18:00.0"].VirtualNum != 4 || devs["18:00.0"].MPSMemoryLimit != 81920/4 || devs["2a:00.0"].VirtualNum != 2 {
		t.Fatalf("rows %+v, want virtual_num 4 and 2, limit memory.total/4", devs)
	}
	firstID := devs["18:00.0"].ID

	// The single pipe layout: one control daemon in the pipe root.
	pipe := filepath.Join(h.dir, "pipe")
	if st.GPUs[0].PipeDirectory != pipe || st.GPUs[1].PipeDirectory != pipe {
		t.Errorf("pipe directories %s, %s, want the root %s for both", st.GPUs[0].PipeDirectory, st.GPUs[1].PipeDirectory, pipe)
	}
	if _, err := os.Stat(filepath.Join(pipe, "sim-control.json")); err != nil {
		t.Errorf("no control daemon in the pipe root: %v", err)
	}

	// Resize: the first GPU goes from 4 to 2, in place.
	h.writeDevices(t, 2)
	eventually(t, "resized", func() (bool, string) {
		devs := c.HostDevices(t, hostID)
		return devs["18:00.0"].VirtualNum == 2 && devs["18:00.0"].ID == firstID, fmt.Sprintf("%+v", devs)
	})

	// Restart and kill -9: the same rows, no new ones.
	if err := d.Stop(t); err != nil {
		t.Fatalf("daemon exited with %v", err)
	}
	d = h.start(t)
	eventually(t, "ready after restart", func() (bool, string) { st := h.status(t); return st.Ready, st.LastError })
	d.Kill(t)
	d = h.start(t)
	eventually(t, "ready after kill -9", func() (bool, string) { st := h.status(t); return st.Ready, st.LastError })
	devs = c.HostDevices(t, hostID)
	if len(devs) != 2 || devs["18:00.0"].ID != firstID {
		t.Fatalf("after restart and kill -9: %+v, want the same two rows", devs)
	}

	// A guest holds a slice of the second GPU; the GPU leaves the
	// configuration: its row stays while held, and goes once released.
	guest, err := c.CreateGuest(ctx, "pod-e2e", hostID)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AttachDevice(ctx, guest, devs["2a:00.0"].ID); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.devices, []byte("devices:\n- path: /dev/dri/renderD128\n  type: NVIDIA_MPS\n  virtual_number: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "held device pending removal", func() (bool, string) {
		st := h.status(t)
		for _, dv := range st.Devices {
			if dv.PendingRemoval && dv.Guest != "" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", st)
	})
	rows, out = climcRows(t, c, hostID)
	if _, ok := gpuRows(t, rows, out)["2a:00.0"]; !ok {
		t.Fatalf("the held GPU's row is gone:\n%s", out)
	}
	if err := c.DetachAll(ctx, guest); err != nil {
		t.Fatal(err)
	}
	eventually(t, "released row purged", func() (bool, string) {
		devs := c.HostDevices(t, hostID)
		_, held := devs["2a:00.0"]
		return !held && len(devs) == 1, fmt.Sprintf("%+v", devs)
	})

	// The daemon's tokens are revoked in keystone (disabling its user does
	// that), then the region is away for a minute: MPS stays up, the
	// daemon keeps retrying, and when the region is back (its token cache
	// gone with it) the revoked token is refused and replaced.
	before := strings.Count(d.Output(), "authenticated with keystone")
	for _, cmd := range []string{"user-disable", "user-enable"} {
		if c.Replaying() {
			c.ApplyRecorded(t, 1) // climc's, as recorded
			continue
		}
		if _, errOut, err := c.RunClimc(ctx, cmd, user); err != nil {
			t.Fatalf("climc %s: %v\n%s", cmd, err, errOut)
		}
	}
	if err := c.StopRegion(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "region unreachable reported", func() (bool, string) {
		st := h.status(t)
		return !st.InventoryReachable, fmt.Sprintf("%+v", st)
	})
	// The outage lasts while the daemon retries: outageRetries failed
	// reconciles after the region went (at mps_sync_interval 1s, the
	// backoff's cap, they come a second apart).
	failed := strings.Count(d.Output(), "reconcile failed")
	eventuallyWithin(t, 2*time.Minute, fmt.Sprintf("%d failed reconciles during the outage", outageRetries), func() (bool, string) {
		n := strings.Count(d.Output(), "reconcile failed") - failed
		return n >= outageRetries || d.Exited(), fmt.Sprintf("%d failed reconciles", n)
	})
	if d.Exited() {
		t.Fatalf("daemon exited during the outage:\n%s", d.Output())
	}
	st = h.status(t)
	if len(st.GPUs) == 0 || !st.GPUs[0].Healthy {
		t.Fatalf("MPS unhealthy during the region's outage: %+v", st)
	}
	if err := c.StartRegion(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "recovered after the outage", func() (bool, string) {
		st := h.status(t)
		return st.Ready && st.InventoryReachable, st.LastError
	})
	d.logs(t, "refused the keystone token")
	eventually(t, "a new keystone token", func() (bool, string) {
		return strings.Count(d.Output(), "authenticated with keystone") > before, d.Output()
	})
	devs = c.HostDevices(t, hostID)
	if len(devs) != 1 || devs["18:00.0"].ID != firstID {
		t.Fatalf("after the outage: %+v, want the one row", devs)
	}
	if strings.Contains(d.Output(), password) {
		t.Fatal("the daemon logged its password")
	}
}
