package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
)

// The simulated 8 x H100 host has its GPUs on buses 18, 2a, 3a, 5d, 9a, ab, ba
// and db (a DGX H100's layout), render nodes renderD128.. in that order.
const devicesYAML = `devices:
- path: /dev/dri/renderD128
  type: NVIDIA_MPS
  virtual_number: 4
- path: /dev/dri/by-path/pci-0000:2a:00.0-render
  type: NVIDIA_MPS
  virtual_number: 2
- path: "00000000:3A:00.0"
  type: NVIDIA_MPS
  virtual_number: %d
- path: /dev/nvidia7
  type: NVIDIA_MPS
  virtual_number: 1
- type: CPH_AMD_GPU
  path: /dev/dri/renderD200
`

// env is one host's directory: configs, MPS pipes and logs, state.
type env struct {
	dir, hostConf, devices, inventoryURL string
}

func newEnv(t *testing.T, inventoryURL string, listen string) *env {
	t.Helper()
	// MPS socket paths must stay under 107 bytes: a short root, not t.TempDir().
	dir, err := os.MkdirTemp("", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := &env{dir: dir, hostConf: filepath.Join(dir, "host.conf"), devices: filepath.Join(dir, "devices.yml"), inventoryURL: inventoryURL}
	tmpl, err := os.ReadFile(filepath.Join("testdata", "host.conf"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"DIR": dir, "INVENTORY": inventoryURL, "LISTEN": listen, "TOKEN_FILE": filesFor(t, inventoryURL).tokenFile}
	conf := os.Expand(string(tmpl), func(k string) string { return vars[k] })
	if err := os.WriteFile(e.hostConf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	e.writeDevices(t, 3)
	return e
}

func (e *env) writeDevices(t *testing.T, n3a int) {
	t.Helper()
	if err := os.WriteFile(e.devices, []byte(fmt.Sprintf(devicesYAML, n3a)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startInventory starts mps-inventory; its database and admin token file
// are those newEnv provisioned for its URL, or new ones (see auth_test.go).
func startInventory(t *testing.T, listen string) (*proc, string) {
	t.Helper()
	f, known := inventories.Load("http://" + listen)
	if !known {
		f = newInventoryFiles(t)
	}
	p, url := startInventoryWith(t, listen, f.(*inventoryFiles))
	if !known {
		registerInventory(t, url, f.(*inventoryFiles))
	}
	return p, url
}

func startDaemon(t *testing.T, e *env) *proc {
	t.Helper()
	return start(t, "mps-daemon", "--config", e.hostConf, "--simulate", "8xH100", "--log-level", "debug")
}

// reconciles counts the daemon's completed reconciles.
func reconciles(p *proc) int { return strings.Count(p.Output(), "msg=reconciled") }

// listAll lists the inventory's devices with mpsctl, env added to its
// environment (MPS_INVENTORY_CA_FILE= for an HTTPS inventory).
func listAll(t *testing.T, url string, env ...string) api.IsolatedDeviceList {
	t.Helper()
	out, errOut, code := run(t, append(mpsctlEnv(t, url), env...), "mpsctl", "-o", "json", "isolated-device-list", "--limit", "100")
	if code != 0 {
		t.Fatalf("mpsctl list: exit %d: %s", code, errOut)
	}
	var l api.IsolatedDeviceList
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("mpsctl -o json output is not the list envelope: %v\n%s", err, out)
	}
	return l
}

func byAddr(l api.IsolatedDeviceList) map[string]api.IsolatedDevice {
	m := map[string]api.IsolatedDevice{}
	for _, d := range l.IsolatedDevices {
		m[d.Addr] = d
	}
	return m
}

func TestDaemonRegistersDevicesRestartsAndResizes(t *testing.T) {
	_, url := startInventory(t, "127.0.0.1:0")
	e := newEnv(t, url, "127.0.0.1:0")
	d := startDaemon(t, e)
	eventually(t, "first reconcile", func() (bool, string) { return reconciles(d) > 0, d.Output() })

	l := listAll(t, url)
	if l.Total != 10 {
		t.Fatalf("want 4+2+3+1 = 10 virtual devices, got %d", l.Total)
	}
	got := byAddr(l)
	want := map[string]struct{ limit, threads int }{
		"18:00.0-0": {20480, 25}, "18:00.0-1": {20480, 25}, "18:00.0-2": {20480, 25}, "18:00.0-3": {20480, 25},
		"2a:00.0-0": {40960, 50}, "2a:00.0-1": {40960, 50},
		"3a:00.0-0": {27306, 33}, "3a:00.0-1": {27306, 33}, "3a:00.0-2": {27306, 33},
		"db:00.0-0": {81920, 100},
	}
	for addr, w := range want {
		dev, ok := got[addr]
		if !ok {
			t.Errorf("no device %s; have %v", addr, keys(got))
			continue
		}
		if dev.MPSMemoryLimit != w.limit || dev.MPSThreadPercentage != w.threads || dev.MPSMemoryTotal != 81920 {
			t.Errorf("%s: limit %d MiB threads %d%% total %d, want %d MiB %d%% of 81920", addr, dev.MPSMemoryLimit, dev.MPSThreadPercentage, dev.MPSMemoryTotal, w.limit, w.threads)
		}
		if dev.DevType != "NVIDIA_MPS" || dev.VendorDeviceID != "10de:2330" || dev.Index != -1 || dev.DeviceMinor != -1 ||
			!strings.HasPrefix(dev.DevicePath, "GPU-") || dev.Model != "NVIDIA H100 80GB HBM3" || dev.PCIEInfo == nil || dev.PCIEInfo.Version != "5.0" {
			t.Errorf("%s: fields not as Cloudpods has them: %+v", addr, dev)
		}
	}
	if got["18:00.0-0"].NumaNode != 0 || got["db:00.0-0"].NumaNode != 1 {
		t.Errorf("numa_node from sysfs: 18 -> %d, db -> %d; want 0 and 1", got["18:00.0-0"].NumaNode, got["db:00.0-0"].NumaNode)
	}

	// The table a Cloudpods user reads.
	table, _, code := run(t, mpsctlEnv(t, url), "mpsctl", "isolated-device-list")
	if code != 0 {
		t.Fatalf("mpsctl exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(table), "\n")
	header := regexp.MustCompile(`\s*\|\s*`).Split(strings.Trim(lines[1], "| "), -1)
	wantHeader := []string{"ID", "Dev_type", "Model", "Addr", "Vendor_device_id", "Host_id", "numa_node", "Device_path", "PCIE_Info", "Index", "Device_minor"}
	if strings.Join(header, ",") != strings.Join(wantHeader, ",") {
		t.Errorf("columns %v, want %v", header, wantHeader)
	}
	if last := lines[len(lines)-1]; last != "*** Total: 10 Pages: 1 Limit: 20 Offset: 0 Page: 1 ***" {
		t.Errorf("footer %q", last)
	}

	// A restart adopts the MPS control daemons and creates no duplicates.
	if err := d.Stop(t); err != nil {
		t.Fatalf("daemon exit on SIGTERM: %v\n%s", err, d.Output())
	}
	if !strings.Contains(d.Output(), "started MPS control daemon") {
		t.Fatalf("the first run should start control daemons:\n%s", d.Output())
	}
	d2 := startDaemon(t, e)
	eventually(t, "reconcile after restart", func() (bool, string) { return reconciles(d2) > 0, d2.Output() })
	if strings.Contains(d2.Output(), "started MPS control daemon") {
		t.Errorf("a restarted daemon must adopt the running control daemons, not start new ones:\n%s", d2.Output())
	}
	l2 := listAll(t, url)
	if l2.Total != 10 {
		t.Fatalf("after restart: %d devices, want 10 (no duplicates)", l2.Total)
	}
	for addr, dev := range byAddr(l2) {
		if got[addr].ID != dev.ID {
			t.Errorf("%s changed id across a restart: %s -> %s", addr, got[addr].ID, dev.ID)
		}
	}

	// virtual_number 3 -> 2 on 3a: one device fewer, caps of the others updated.
	if err := d2.Stop(t); err != nil {
		t.Fatal(err)
	}
	e.writeDevices(t, 2)
	d3 := startDaemon(t, e)
	eventually(t, "reconcile after resize", func() (bool, string) { return reconciles(d3) > 0, d3.Output() })
	l3 := byAddr(listAll(t, url))
	if len(l3) != 9 {
		t.Fatalf("after resize: %d devices, want 9", len(l3))
	}
	if _, ok := l3["3a:00.0-2"]; ok {
		t.Error("3a:00.0-2 should be gone")
	}
	if dev := l3["3a:00.0-0"]; dev.MPSMemoryLimit != 40960 || dev.MPSThreadPercentage != 50 || dev.ID != got["3a:00.0-0"].ID {
		t.Errorf("3a:00.0-0 after resize: %+v", dev)
	}
}

func keys(m map[string]api.IsolatedDevice) []string {
	var k []string
	for a := range m {
		k = append(k, a)
	}
	sort.Strings(k)
	return k
}

// freePort finds a loopback port nothing listens on.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func get(url string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestDaemonWaitsForTheInventoryAndBecomesReady(t *testing.T) {
	invAddr, daemonAddr := freePort(t), freePort(t)
	e := newEnv(t, "http://"+invAddr, daemonAddr)
	d := startDaemon(t, e)
	eventually(t, "a failed reconcile", func() (bool, string) {
		return strings.Contains(d.Output(), "reconcile failed"), d.Output()
	})
	if code, body := get("http://" + daemonAddr + "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with no inventory: %d %q, want 503", code, body)
	}
	if code, _ := get("http://" + daemonAddr + "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d, want 200", code)
	}
	_, url := startInventory(t, invAddr)
	eventually(t, "ready once the inventory answers", func() (bool, string) {
		code, body := get("http://" + daemonAddr + "/readyz")
		return code == http.StatusOK, body
	})
	if n := listAll(t, url).Total; n != 10 {
		t.Errorf("%d devices registered after the outage, want 10", n)
	}
	if d.Exited() {
		t.Fatalf("the daemon exited during the outage:\n%s", d.Output())
	}
}
