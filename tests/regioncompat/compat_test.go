// Package regioncompat is the proof of issue 15: Cloudpods' own climc,
// unchanged, against mps-inventory (on SQLite and on PostgreSQL), printing
// what it prints against a real Cloudpods region that holds the same rows.
//
// The test makes one host and the same seven rows in the region and in one
// inventory per backend (SQLite, PostgreSQL): one NVIDIA_MPS row per slice,
// as Cloudpods 4.0.3 and this inventory keep them; the region, Cloudpods'
// master, takes that dev_type once an isolated-device model defines it, see
// cloudpods.CreateDeviceModel. It then runs the same climc commands against
// all three at once, in lockstep, and compares what each inventory prints
// with what the region prints,
// normalised only as normalise_test.go says: lists (table and json, with
// --host, --dev-type, --model, --unused, --gpu, --limit, --offset,
// --details), shows by id and by name, attach and detach by id and by name
// with climc, attach by model and detach-all with Cloudpods' own request
// bodies (climc has no command for them), and purge with and without
// --purge; errors are compared by class and code.
package regioncompat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/cloudpods"
	"yunion.io/x/mps-daemon/internal/testsupport/pgtest"
	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/client"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

func TestMain(m *testing.M) {
	os.Exit(cloudpods.Run(func() int { return pgtest.Run(m.Run) }))
}

const (
	p40  = "Tesla P40"
	h100 = "NVIDIA H100 80GB HBM3"
)

// rows are the devices both sides hold, in creation order. Names ascend in
// that order: Cloudpods lists newest first, by created_at (to the second)
// then name, the inventory by creation order, and with ascending names the
// two orders are one.
func rows(hostID string) []map[string]any {
	pcie := map[string]any{"lane_width": 16, "throughput": "15.76 GB/s", "transfer_rate_per_lane": "8GT/s", "version": "3.0"}
	var out []map[string]any
	for i := range 4 { // a Tesla P40 in 4 slices; numa_node, index, device_minor left out (-1)
		out = append(out, map[string]any{
			"name": fmt.Sprintf("mps-%02d", i), "host_id": hostID, "dev_type": api.DevTypeNvidiaMPS, "sharing_mode": "EXCLUSIVE",
			"model": p40, "addr": fmt.Sprintf("00:06.0-%d", i), "vendor_device_id": "10de:1b38",
			"device_path": "GPU-76aef7ff-372d-2432-b4b4-beca4d8d3400", "pcie_info": pcie,
			"mps_memory_limit": 6144, "mps_memory_total": 24576, "mps_thread_percentage": 25,
		})
	}
	for i := range 2 { // an H100 in 2 slices, on NUMA node 1
		out = append(out, map[string]any{
			"name": fmt.Sprintf("mps-%02d", 4+i), "host_id": hostID, "dev_type": api.DevTypeNvidiaMPS, "sharing_mode": "EXCLUSIVE",
			"model": h100, "addr": fmt.Sprintf("1a:00.0-%d", i), "vendor_device_id": "10de:2330",
			"device_path": "GPU-1a1a1a1a-0000-4000-8000-000000000001", "numa_node": 1,
			"mps_memory_limit": 40779, "mps_memory_total": 81559, "mps_thread_percentage": 50,
		})
	}
	// A whole GPU in the shape Cloudpods' master host agent registers MPS
	// (dev_type GPU, sharing_mode MPS, virtual_num), with a field this
	// inventory does not keep (detected_on_host).
	out = append(out, map[string]any{
		"name": "mps-06", "host_id": hostID, "dev_type": "GPU", "sharing_mode": "MPS", "virtual_num": 4,
		"model": h100, "addr": "1b:00.0", "vendor_device_id": "10de:2330", "memory_size": 20389, "numa_node": 0,
		"device_path": "GPU-1b1b1b1b-0000-4000-8000-000000000002", "detected_on_host": true, "hot_pluggable": false,
		"mps_memory_limit": 20389, "mps_memory_total": 81559, "mps_thread_percentage": 25,
	})
	return out
}

// compared is the region and the inventories (one per backend), with their
// labels. They hold the same rows and go through the same steps in
// lockstep: each climc command runs once against the region and once
// against each inventory, all at once, and each inventory's answer is
// compared with the region's.
type compared struct {
	t      *testing.T
	region *side
	host   string // the host's name, the same on every side
	rHost  string // the region's host id
	rDevs  map[string]string
	rl     labels
	invs   []*inventory
	// guestA and guestB are the guests' names (the region's guests, the
	// inventory's guest ids).
	guestA, guestB string
}

// inventory is one backend's inventory.
type inventory struct {
	*side
	backend string
	st      *store.Store
	url     string            // its address
	host    string            // its host id
	devs    map[string]string // device name -> id
	l       labels
}

// run is the number of TestRealClimcAgainstTheInventory runs in this
// process (go test -count), which name their hosts and guests apart in the
// one region.
var run atomic.Int32

func TestRealClimcAgainstTheInventory(t *testing.T) {
	cp := cloudpods.Get(t)
	ctx := t.Context()
	// What lets the region keep one NVIDIA_MPS row per slice.
	if err := cp.CreateDeviceModel(ctx, p40, api.DevTypeNvidiaMPS, "10de", "1b38"); err != nil {
		t.Fatal(err)
	}
	if err := cp.CreateDeviceModel(ctx, h100, api.DevTypeNvidiaMPS, "10de", "2330"); err != nil {
		t.Fatal(err)
	}
	c := setUp(t, cp, int(run.Add(1)))
	c.lists("with the rows as created")
	c.shows("mps-01")
	c.errors()
	c.attachDetachPurge()
	for _, inv := range c.invs {
		t.Run(inv.backend, func(t *testing.T) { daemonRows(t, inv) })
	}
}

// setUp makes the host and the rows on every side: the region and one
// inventory per backend.
func setUp(t *testing.T, cp *cloudpods.Cloud, run int) *compared {
	ctx := t.Context()
	host := fmt.Sprintf("compat-%d", run)
	c := &compared{t: t, region: regionSide(cp), host: host}
	mac, ip := fmt.Sprintf("02:00:00:00:15:%02x", run%256), fmt.Sprintf("127.0.0.%d", 150+run%100)
	var err error
	if c.rHost, err = cp.CreateHost(ctx, c.host, mac, ip); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { purgeAll(cp, c.rHost) })
	for _, b := range storetest.Backends() {
		inv := &inventory{backend: b.Name, st: storetest.Open(t, b.DSN(t)), devs: map[string]string{}}
		var srv *httptest.Server
		inv.side, srv = inventorySide(t, cp, inv.st, "compat-admin")
		inv.side.name = "inventory on " + b.Name
		inv.url = srv.URL
		// The inventory's host, as Cloudpods' host agent creates one.
		var hb api.HostBody
		if err := inv.call(ctx, http.MethodPost, "/zones/default/hosts", cloudpods.HostCreateBody(c.host, mac, ip), &hb); err != nil {
			t.Fatalf("%s: %v", inv.name, err)
		}
		inv.host = hb.Host.ID
		c.invs = append(c.invs, inv)
	}
	c.rDevs = map[string]string{}
	sides := []struct {
		side *side
		host string
		devs map[string]string
	}{{c.region, c.rHost, c.rDevs}}
	for _, inv := range c.invs {
		sides = append(sides, struct {
			side *side
			host string
			devs map[string]string
		}{inv.side, inv.host, inv.devs})
	}
	for _, s := range sides {
		for _, r := range rows(s.host) {
			var out struct {
				IsolatedDevice struct{ ID, Name string } `json:"isolated_device"`
			}
			if err := s.side.call(ctx, http.MethodPost, "/isolated_devices", map[string]any{"isolated_device": r}, &out); err != nil {
				t.Fatalf("%s: %v", s.side.name, err)
			}
			s.devs[out.IsolatedDevice.Name] = out.IsolatedDevice.ID
		}
	}
	c.rl = labels{c.rHost: "host"}
	for name, id := range c.rDevs {
		c.rl[id] = "dev:" + name
	}
	for _, inv := range c.invs {
		inv.l = labels{inv.host: "host"}
		for name, id := range inv.devs {
			inv.l[id] = "dev:" + name
		}
	}
	c.guestA, c.guestB = "pod-a-"+host, "pod-b-"+host
	for _, g := range []string{c.guestA, c.guestB} {
		if err := c.region.newGuest(ctx, g, c.rHost); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// purgeAll removes what a run left in the shared region, so the next run
// starts from the same rows (the region answers the purge after deleting
// the row, with an error from its absent scheduler: ignored).
func purgeAll(cp *cloudpods.Cloud, hostID string) {
	ctx := context.Background()
	var list struct {
		IsolatedDevices []struct{ ID string } `json:"isolated_devices"`
	}
	if cp.Call(ctx, http.MethodGet, "/isolated_devices?scope=system&limit=0&host="+hostID, nil, &list) != nil {
		return
	}
	for _, d := range list.IsolatedDevices {
		_ = cp.Call(ctx, http.MethodPost, "/isolated_devices/"+d.ID+"/purge", map[string]any{"isolated_device": map[string]any{"purge": true}}, nil)
	}
}

// all runs climc with args on every side at once: the region's result, and
// each inventory's in c.invs' order. The inventories get the same args, or
// with per(inv) when per is not nil (ids differ between sides).
func (c *compared) all(rArgs []string, per func(inv *inventory) []string) (region result, invs []result) {
	c.t.Helper()
	errs := make([]error, 1+len(c.invs))
	invs = make([]result, len(c.invs))
	var wg sync.WaitGroup
	rTmp := c.t.TempDir()
	wg.Go(func() { region, errs[0] = c.region.run(c.t.Context(), rTmp, rArgs...) })
	for n, inv := range c.invs {
		args := rArgs
		if per != nil {
			args = per(inv)
		}
		tmp := c.t.TempDir()
		wg.Go(func() { invs[n], errs[1+n] = inv.run(c.t.Context(), tmp, args...) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.t.Fatal(err)
	}
	return region, invs
}

// list compares a list, as a table or (-o json first) as JSON.
func (c *compared) list(args ...string) {
	c.t.Helper()
	what := strings.Join(args, " ")
	r, is := c.all(args, nil)
	for n, i := range is {
		inv := c.invs[n]
		if r.code != 0 || i.code != 0 {
			c.t.Fatalf("%s: exit %d (region) and %d (%s)\nregion: %s%s\ninventory: %s%s", what, r.code, i.code, inv.name, r.stdout, r.stderr, i.stdout, i.stderr)
		}
		if args[0] == "--output-format" {
			sameJSON(c.t, inv.backend+": "+what, r.stdout, i.stdout, c.rl, inv.l)
			continue
		}
		rt, it := normTable(parseTable(c.t, r.stdout), c.rl, true), normTable(parseTable(c.t, i.stdout), inv.l, false)
		if rt.footer == "" || rt.String() != it.String() {
			c.t.Errorf("%s differs (%s)\nregion:\n%s\ninventory:\n%s\n(raw: region\n%s\ninventory\n%s)", what, inv.name, rt, it, r.stdout, i.stdout)
		}
	}
}

// lists compares every list option the issue names.
func (c *compared) lists(when string) {
	c.t.Helper()
	c.t.Logf("lists, %s", when)
	h := c.host
	for _, args := range [][]string{
		{"isolated-device-list"},
		{"isolated-device-list", "--host", h},
		{"isolated-device-list", "--host", h, "--details"},
		{"isolated-device-list", "--host", h, "--dev-type", api.DevTypeNvidiaMPS},
		{"isolated-device-list", "--host", h, "--dev-type", api.DevTypeNvidiaMPS, "--dev-type", "GPU", "--limit", "3"},
		{"isolated-device-list", "--host", h, "--model", p40},
		{"isolated-device-list", "--host", h, "--model", h100, "--details"},
		{"isolated-device-list", "--host", h, "--gpu"},
		{"isolated-device-list", "--host", h, "--unused"},
		{"isolated-device-list", "--host", h, "--unused", "--model", p40},
		{"isolated-device-list", "--host", h, "--limit", "2"},
		{"isolated-device-list", "--host", h, "--limit", "2", "--offset", "3"},
		{"isolated-device-list", "--host", h, "--limit", "0"},
		{"isolated-device-list", "--host", h, "--offset", "5"},
		{"isolated-device-list", "--host", h, "--model", "No Such Model"},
		{"--output-format", "json", "isolated-device-list", "--host", h},
		{"--output-format", "json", "isolated-device-list", "--host", h, "--details", "--unused"},
		{"--output-format", "json", "isolated-device-list", "--host", h, "--gpu", "--limit", "1", "--offset", "0"},
		{"--output-format", "json", "isolated-device-list", "--host", h, "--model", "No Such Model"},
	} {
		c.list(args...)
	}
}

// shows compares isolated-device-show by id and by name, table and JSON.
func (c *compared) shows(name string) {
	c.t.Helper()
	for _, byName := range []bool{false, true} {
		rArgs := []string{"isolated-device-show", c.rDevs[name]}
		per := func(inv *inventory) []string { return []string{"isolated-device-show", inv.devs[name]} }
		if byName {
			rArgs, per = []string{"isolated-device-show", name}, nil
		}
		r, is := c.all(rArgs, per)
		for n, i := range is {
			inv := c.invs[n]
			if r.code != 0 || i.code != 0 {
				c.t.Fatalf("show %s: exit %d and %d (%s): %s %s", name, r.code, i.code, inv.name, r.stderr, i.stderr)
			}
			compareShow(c.t, inv.backend+": isolated-device-show "+name, kv(parseTable(c.t, r.stdout)), kv(parseTable(c.t, i.stdout)), c.rl, inv.l)
		}
	}
}

// errors compares what climc reports for what is not there.
func (c *compared) errors() {
	c.t.Helper()
	for _, tt := range []struct {
		args        []string
		sameDetails bool
	}{
		// climc's own name lookup after the 404: its words on both sides.
		{[]string{"isolated-device-show", "no-such-device"}, true},
		{[]string{"isolated-device-list", "--host", "no-such-host"}, false},
	} {
		what := strings.Join(tt.args, " ")
		r, is := c.all(tt.args, nil)
		for n, i := range is {
			inv := c.invs[n]
			if r.code == 0 || i.code != r.code {
				c.t.Errorf("%s: exit %d (region) and %d (%s)", what, r.code, i.code, inv.name)
				continue
			}
			re, ie := parseClimcError(c.t, what, r.stderr), parseClimcError(c.t, inv.backend+": "+what, i.stderr)
			if re.Class != ie.Class || re.Code != ie.Code || tt.sameDetails && re.Details != ie.Details {
				c.t.Errorf("%s: the region says %+v, the %s %+v", what, re, inv.name, ie)
			}
		}
	}
	// A path neither has (issue 22): the client's error, 404 NotFoundError,
	// on both sides.
	const path = "/no-such-resources"
	rs, rc := refusal(c.region.call(c.t.Context(), http.MethodGet, path, nil, nil))
	for _, inv := range c.invs {
		is, ic := refusal(inv.call(c.t.Context(), http.MethodGet, path, nil, nil))
		if rs != http.StatusNotFound || rs != is || rc != ic {
			c.t.Errorf("GET %s: the region answers %d %s, the %s %d %s", path, rs, rc, inv.name, is, ic)
		}
	}
}

// attachDetachPurge walks a device's life with climc (and Cloudpods'
// request bodies where climc has no command), comparing the rows after
// each step.
func (c *compared) attachDetachPurge() {
	t, ctx := c.t, c.t.Context()
	// each runs f on every side at once: the region and each inventory.
	each := func(f func(s *side, devs map[string]string)) {
		t.Helper()
		var wg sync.WaitGroup
		wg.Go(func() { f(c.region, c.rDevs) })
		for _, inv := range c.invs {
			wg.Go(func() { f(inv.side, inv.devs) })
		}
		wg.Wait()
	}
	step := func(what string, f func(s *side, devs map[string]string)) {
		t.Helper()
		each(f)
		c.list("isolated-device-list", "--host", c.host, "--details")
		c.list("isolated-device-list", "--host", c.host, "--unused")
		c.list("--output-format", "json", "isolated-device-list", "--host", c.host)
		t.Logf("compared after %s", what)
	}
	// climcOK and the steps' functions run on each's goroutines: they
	// report with t.Error and return; each step checks t.Failed after.
	climcOK := func(s *side, guest string, args ...string) {
		r, err := s.run(ctx, t.TempDir(), args...)
		if err != nil || r.code != 0 {
			t.Errorf("%s: climc %s: %v exit %d\n%s%s", s.name, strings.Join(args, " "), err, r.code, r.stdout, r.stderr)
			return
		}
		if err := s.settle(ctx, guest); err != nil {
			t.Error(err)
		}
	}
	stop := func() {
		t.Helper()
		if t.Failed() {
			t.FailNow()
		}
	}
	// climc prints the server the device went to; a server here is only its
	// id, so that print is not compared: the rows are.
	step("attach by id", func(s *side, devs map[string]string) {
		climcOK(s, c.guestA, "server-attach-isolated-device", c.guestA, devs["mps-00"])
	})
	stop()
	step("attach by name", func(s *side, _ map[string]string) {
		climcOK(s, c.guestA, "server-attach-isolated-device", c.guestA, "mps-01")
	})
	stop()
	c.shows("mps-01") // held: the guest in the details

	// Refusals, by class and code (the region names the device "not
	// enough", the inventory names who holds it); the purge's text is the
	// one Cloudpods' host agent matches, on both.
	for _, tt := range []struct {
		args        func(devs map[string]string) []string
		class       string
		sameDetails bool
	}{
		{func(d map[string]string) []string {
			return []string{"server-attach-isolated-device", c.guestB, d["mps-00"]}
		}, api.ClassBadRequest, false},
		{func(d map[string]string) []string { return []string{"isolated-device-purge", d["mps-00"]} }, api.ClassBadRequest, true},
	} {
		r, is := c.all(tt.args(c.rDevs), func(inv *inventory) []string { return tt.args(inv.devs) })
		for n, i := range is {
			inv := c.invs[n]
			what := strings.Join(tt.args(inv.devs), " ")
			re, ie := parseClimcError(t, "region: "+what, r.stderr+r.stdout), parseClimcError(t, inv.name+": "+what, i.stderr+i.stdout)
			if r.code != i.code || re.Class != tt.class || ie.Class != tt.class || re.Code != 400 || ie.Code != 400 ||
				tt.sameDetails && (re.Details != api.MsgDeviceUsedByServer || ie.Details != re.Details) {
				t.Errorf("%v: region exit %d %+v, %s exit %d %+v", tt.args(inv.devs), r.code, re, inv.name, i.code, ie)
			}
		}
	}

	// Refusals of raw requests climc has no command for: the DELETE of a
	// held device, and an attach by model asking for more devices than are
	// free. Both sides answer the same status and class, and nothing changes.
	for _, tt := range []struct {
		what   string
		req    func(devs map[string]string) (method, path string)
		body   any
		status int
		class  string
	}{
		{"DELETE of a held device", func(d map[string]string) (string, string) {
			return http.MethodDelete, "/isolated_devices/" + d["mps-00"]
		}, nil, http.StatusNotAcceptable, api.ClassNotEmpty},
		{"attach by model past the free devices", func(map[string]string) (string, string) {
			return http.MethodPost, "/servers/" + c.guestB + "/attach-isolated-device"
		}, map[string]any{"server": map[string]any{"model": h100, "count": 100, "sharing_mode": "EXCLUSIVE"}}, http.StatusBadRequest, api.ClassInsufficientResource},
	} {
		rm, rp := tt.req(c.rDevs)
		rs, rc := refusal(c.region.call(ctx, rm, rp, tt.body, nil))
		for _, inv := range c.invs {
			im, ip := tt.req(inv.devs)
			is, ic := refusal(inv.call(ctx, im, ip, tt.body, nil))
			if rs != tt.status || is != tt.status || rc != tt.class || ic != tt.class {
				t.Errorf("%s: region %d %s, %s %d %s", tt.what, rs, rc, inv.name, is, ic)
			}
			t.Logf("%s: region %d %s, %s %d %s", tt.what, rs, rc, inv.name, is, ic)
		}
	}
	c.lists("after the refused requests")

	step("detach by id", func(s *side, devs map[string]string) {
		climcOK(s, c.guestA, "server-detach-isolated-device", c.guestA, devs["mps-00"], "0")
	})
	stop()

	// By model: Cloudpods' body (climc has no such command). Which free
	// slices each side picks is its own choice: the comparison is of how
	// many the guest got and how many are left.
	each(func(s *side, _ map[string]string) {
		body := map[string]any{"server": map[string]any{"model": p40, "count": 2, "sharing_mode": "EXCLUSIVE"}}
		if err := s.call(ctx, http.MethodPost, "/servers/"+c.guestB+"/attach-isolated-device", body, nil); err != nil {
			t.Errorf("%s: attach by model: %v", s.name, err)
			return
		}
		if err := s.settle(ctx, c.guestB); err != nil {
			t.Error(err)
		}
	})
	stop()
	for _, args := range [][]string{
		{"isolated-device-list", "--host", c.host, "--unused", "--model", p40},
		{"isolated-device-list", "--host", c.host, "--unused", "--model", h100},
	} {
		r, is := c.all(args, nil)
		for n, i := range is {
			if rf, ifo := parseTable(t, r.stdout).footer, parseTable(t, i.stdout).footer; rf != ifo || rf == "" {
				t.Errorf("%v after attach by model: region %q, %s %q", args, rf, c.invs[n].name, ifo)
			}
		}
	}
	if rn := c.held(c.region, c.rl, c.guestB); rn != 2 {
		t.Errorf("attach by model: the guest holds %d in the region; want 2", rn)
	}
	for _, inv := range c.invs {
		if in := c.held(inv.side, inv.l, c.guestB); in != 2 {
			t.Errorf("attach by model: the guest holds %d in the %s; want 2", in, inv.name)
		}
	}
	step("detach all (by model's guest)", func(s *side, _ map[string]string) {
		if err := s.call(ctx, http.MethodPost, "/servers/"+c.guestB+"/detach-isolated-device",
			map[string]any{"server": map[string]any{"detach_all": true}}, nil); err != nil {
			t.Errorf("%s: detach all: %v", s.name, err)
			return
		}
		if err := s.settle(ctx, c.guestB); err != nil {
			t.Error(err)
		}
	})
	stop()

	// Purge: the harness region deletes the row, then answers an error
	// from its absent scheduler service; its exit status is not compared.
	step("purge --purge of a held device, by name", func(s *side, _ map[string]string) {
		r, err := s.run(ctx, t.TempDir(), "isolated-device-purge", "--purge", "mps-01")
		if err != nil || s != c.region && r.code != 0 {
			t.Errorf("%s: purge --purge: %v exit %d %s", s.name, err, r.code, r.stderr)
		}
	})
	stop()
	step("purge of a free device, by id", func(s *side, devs map[string]string) {
		r, err := s.run(ctx, t.TempDir(), "isolated-device-purge", devs["mps-02"])
		if err != nil || s != c.region && r.code != 0 {
			t.Errorf("%s: purge: %v exit %d %s", s.name, err, r.code, r.stderr)
		}
	})
	stop()
	c.lists("after attaching, detaching and purging")
}

// held counts the devices guest holds, from a details list.
func (c *compared) held(s *side, l labels, guest string) int {
	c.t.Helper()
	r := s.climc(c.t, "isolated-device-list", "--host", c.host, "--details")
	tb := normTable(parseTable(c.t, r.stdout), l, s == c.region)
	g := slices.Index(tb.header, "Guest")
	n := 0
	for _, row := range tb.rows {
		if g >= 0 && row[g] == guest {
			n++
		}
	}
	return n
}

// daemonRows: rows as this project's daemon registers them (its client,
// Bearer token, no sharing_mode) list with the real climc next to the
// others. (Inventory only: Cloudpods' master region refuses a row without
// a sharing mode.)
func daemonRows(t *testing.T, inv *inventory) {
	token, _, err := inv.st.CreateToken(t.Context(), store.NewToken{Role: store.RoleHost, Host: "gpu-daemon", Name: "daemon"})
	if err != nil {
		t.Fatal(err)
	}
	cl := client.New(client.Options{URL: inv.url, Token: token})
	h, err := cl.EnsureHost(t.Context(), "gpu-daemon")
	if err != nil {
		t.Fatal(err)
	}
	want := []api.IsolatedDevice{{
		DevType: api.DevTypeNvidiaMPS, Model: h100, Addr: "3c:00.0-0", VendorDeviceID: "10de:2330",
		DevicePath: "GPU-3c3c3c3c-0000-4000-8000-000000000003", NumaNode: -1, Index: -1, DeviceMinor: -1,
		MPSMemoryLimit: 81559, MPSMemoryTotal: 81559, MPSThreadPercentage: 100,
		CDIName: "yunion.io/mps-gpu=GPU-3c3c3c3c-0000-4000-8000-000000000003::0",
	}}
	if _, err := cl.SyncDevices(t.Context(), h.ID, want); err != nil {
		t.Fatal(err)
	}
	if res, err := cl.SyncDevices(t.Context(), h.ID, want); err != nil || res.Unchanged != 1 {
		t.Errorf("second sync: %+v %v; want it unchanged (names the inventory gave are kept)", res, err)
	}
	r := inv.climc(t, "isolated-device-list", "--host", "gpu-daemon")
	tb := parseTable(t, r.stdout)
	if r.code != 0 || len(tb.rows) != 1 || !strings.Contains(r.stdout, "3c:00.0-0") || !strings.Contains(tb.footer, "Total: 1 ") {
		t.Errorf("the daemon's device in climc's list:\n%s%s", r.stdout, r.stderr)
	}
}

// refusal reads the status and class of a request's error, as
// cloudpods.Request words it ("METHOD URL: 406 Not Acceptable: {body}");
// 0 and "" when the request succeeded.
func refusal(err error) (status int, class string) {
	if err == nil {
		return 0, ""
	}
	m := refusalRE.FindStringSubmatch(err.Error())
	if m == nil {
		return -1, err.Error()
	}
	status, _ = strconv.Atoi(m[1])
	var body struct {
		Class string `json:"class"`
	}
	_ = json.Unmarshal([]byte(m[2]), &body)
	return status, body.Class
}

var refusalRE = regexp.MustCompile(`: (\d{3}) [^:]*: (\{.*\})\s*$`)
