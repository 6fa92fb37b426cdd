package server

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// Cloudpods' host agent's conversation up to its devices, with its own
// request shapes (pkg/hostman: hostinfo.go, isolated_device.go): find the
// zone through the network of its address, look itself up by MAC, create
// its host in the zone, then register a GPU with the fields it sends (some
// unknown here, ignored), find it again as its sync does, update it, and
// purge it. Done with a host token, as a remote agent would be.
func TestHostAgentConversation(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		hostTok, _, err := e.st.CreateToken(t.Context(), store.NewToken{Role: store.RoleHost, Host: "gpuhost-10-0-0-7", Name: "agent"})
		if err != nil {
			t.Fatal(err)
		}
		as := []string{"Authorization", "", "X-Auth-Token", hostTok}
		get := func(path string, out any) {
			t.Helper()
			st, b := e.call("GET", path, "", as...)
			if st != http.StatusOK {
				t.Fatalf("GET %s: %d %s", path, st, b)
			}
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
		}

		var nets struct {
			Networks []struct {
				WireID string `json:"wire_id"`
			} `json:"networks"`
		}
		get("/networks?ip=10.0.0.7&is_classic=true&provider=OneCloud&scope=system&limit=0&vpc=default", &nets)
		if len(nets.Networks) != 1 {
			t.Fatalf("networks: %+v, want one", nets)
		}
		var wire struct {
			Wire struct {
				ZoneID string `json:"zone_id"`
			} `json:"wire"`
		}
		get("/wires/"+nets.Networks[0].WireID, &wire)
		var zone struct {
			Zone struct{ ID, Name, Cloudregion string } `json:"zone"`
		}
		get("/zones/"+wire.Wire.ZoneID+"?provider=OneCloud", &zone)
		if zone.Zone.ID == "" || zone.Zone.Name == "" {
			t.Fatalf("zone %+v", zone)
		}

		var hosts api.HostList
		get("/hosts?provider=OneCloud&details=true&scope=system&any_mac=02:00:00:00:07:01", &hosts)
		if len(hosts.Hosts) != 0 {
			t.Fatalf("a host before registering: %+v", hosts)
		}
		create := `{"host":{"generate_name":"gpuhost-10-0-0-7","hostname":"gpuhost","access_ip":"10.0.0.7",
			"access_mac":"02:00:00:00:07:01","manager_uri":"http://10.0.0.7:8885","cpu_count":16,"node_count":1,
			"cpu_desc":"test cpu","mem_size":"131072","storage_type":"rotate","sys_info":{"manufacture":"x"},
			"host_type":"container","metadata":{"k":"v"}}}`
		st, b := e.call("POST", "/zones/"+zone.Zone.ID+"/hosts", create, as...)
		if st != http.StatusOK {
			t.Fatalf("create host: %d %s", st, b)
		}
		var hb api.HostBody
		_ = json.Unmarshal(b, &hb)
		if hb.Host.Name != "gpuhost-10-0-0-7" || hb.Host.AccessMAC != "02:00:00:00:07:01" || hb.Host.HostType != "container" {
			t.Errorf("created %+v", hb.Host)
		}
		get("/hosts?details=true&scope=system&any_mac=02:00:00:00:07:01", &hosts)
		if len(hosts.Hosts) != 1 || hosts.Hosts[0].ID != hb.Host.ID {
			t.Fatalf("host by MAC: %+v", hosts)
		}
		// At its next start it updates its own record (not renaming it).
		update := strings.Replace(strings.Replace(create, `"generate_name":"gpuhost-10-0-0-7",`, "", 1), "10.0.0.7", "10.0.0.8", -1)
		if st, b := e.call("PUT", "/hosts/"+hb.Host.ID, update, as...); st != http.StatusOK || !strings.Contains(string(b), `"access_ip":"10.0.0.8"`) {
			t.Errorf("update own host: %d %s", st, b)
		}
		st, b = e.call("PUT", "/hosts/"+hb.Host.ID, `{"host":{"name":"another-name"}}`, as...)
		checkError(t, st, b, http.StatusForbidden, api.ClassForbidden, "may not rename its host")
		if !strings.Contains(e.log.String(), "ignoring unknown fields of the request body") ||
			!strings.Contains(e.log.String(), "host.cpu_count") {
			t.Errorf("the unknown host fields are not in the debug log:\n%s", e.log.String())
		}

		// A GPU as the agent registers it (GetApiResourceData), in the
		// per-GPU shape of Cloudpods' master: dev_type GPU, sharing_mode MPS.
		gpu := `{"isolated_device":{"dev_type":"GPU","addr":"06:00.0","model":"NVIDIA A100-SXM4-40GB",
			"vendor_device_id":"10de:20b0","virtual_num":4,"hot_pluggable":false,"sharing_mode":"MPS",
			"detected_on_host":true,"host_id":"` + hb.Host.ID + `","memory_size":10240,"numa_node":0,
			"device_path":"GPU-00000000-1111-2222-3333-444444444444","card_path":"/dev/dri/card0",
			"mps_memory_limit":10240,"mps_memory_total":40960,"mps_thread_percentage":25}}`
		st, b = e.call("POST", "/isolated_devices", gpu, as...)
		if st != http.StatusOK {
			t.Fatalf("create device: %d %s", st, b)
		}
		var db api.IsolatedDeviceBody
		_ = json.Unmarshal(b, &db)
		d := db.IsolatedDevice
		if d.DevType != "GPU" || d.SharingMode != "MPS" || d.VirtualNum != 4 || d.MemorySize != 10240 || d.NumaNode != 0 ||
			d.Index != -1 || d.DeviceMinor != -1 || !strings.HasPrefix(d.Name, "dev_gpuhost-10-0-0-7_") || d.Host != hb.Host.Name {
			t.Errorf("created %+v", d)
		}
		// The sync's list: details, limit 0 (all), its host, scope.
		var list api.IsolatedDeviceList
		get("/isolated_devices?details=true&limit=0&host="+hb.Host.ID+"&scope=system", &list)
		if len(list.IsolatedDevices) != 1 || list.IsolatedDevices[0].ID != d.ID || list.Limit != 2048 {
			t.Fatalf("sync list %+v", list)
		}
		// Its update echoes the id and host, and counts.
		st, b = e.call("PUT", "/isolated_devices/"+d.ID, strings.Replace(gpu, `"dev_type":"GPU"`, `"id":"`+d.ID+`","dev_type":"GPU","index":2,"device_minor":2`, 1), as...)
		if st != http.StatusOK {
			t.Fatalf("update device: %d %s", st, b)
		}
		_ = json.Unmarshal(b, &db)
		if db.IsolatedDevice.Index != 2 || db.IsolatedDevice.DeviceMinor != 2 || db.IsolatedDevice.UpdateVersion != 1 || db.IsolatedDevice.Name != d.Name {
			t.Errorf("updated %+v", db.IsolatedDevice)
		}
		// It purges a device it no longer detects with an empty wrapped body.
		if st, b := e.call("POST", "/isolated_devices/"+d.ID+"/purge", `{"isolated_device":{}}`, as...); st != http.StatusOK {
			t.Errorf("purge: %d %s", st, b)
		}
		// What the agent asks next is not served, and says so.
		st, b = e.call("POST", "/hosts/"+hb.Host.ID+"/metadata", `{"host":{"k":"v"}}`, as...)
		checkError(t, st, b, http.StatusNotFound, api.ClassHandlerNotFound, "mps-inventory has no POST /hosts/"+hb.Host.ID+"/metadata")
		st, b = e.call("POST", "/zones/zone9/hosts", create, as...)
		checkError(t, st, b, http.StatusNotFound, api.ClassNotFound, "zone zone9 not found")
	})
}

// climc's attach and detach send wrapped bodies and read the server back;
// this project's client sends them unwrapped and reads the devices it
// changed.
func TestWrappedAttachAnswersTheServer(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		devs := seedGPUs(t, e.st, "gpu-1", 2, 2)
		var sv struct {
			Server struct {
				ID              string               `json:"id"`
				IsolatedDevices []api.IsolatedDevice `json:"isolated_devices"`
			} `json:"server"`
		}
		// By id and by name.
		e.mustCall("POST", "/servers/pod-1/attach-isolated-device", `{"server":{"device":"`+devs[0].ID+`"}}`, &sv)
		e.mustCall("POST", "/servers/pod-1/attach-isolated-device", `{"server":{"device":"`+devs[1].Name+`","gpu_type":"HPC"}}`, &sv)
		if sv.Server.ID != "pod-1" || !slices.Equal(devAddrs(sv.Server.IsolatedDevices), []string{"1a:00.0-0", "1a:00.0-1"}) {
			t.Errorf("attach answered %+v", sv)
		}
		// By model, Cloudpods' form: no host (the guest's, or the only
		// one), and a sharing mode, which rows of another mode do not match
		// (rows of none match any).
		mps := "MPS"
		for _, d := range devs[2:] {
			if _, err := e.st.UpdateDevice(t.Context(), d.ID, store.DeviceUpdate{SharingMode: &mps}); err != nil {
				t.Fatal(err)
			}
		}
		st, b := e.call("POST", "/servers/pod-2/attach-isolated-device", `{"server":{"model":"NVIDIA H100 80GB HBM3","count":2,"sharing_mode":"EXCLUSIVE"}}`)
		checkError(t, st, b, http.StatusBadRequest, api.ClassInsufficientResource, "0 free")
		e.mustCall("POST", "/servers/pod-2/attach-isolated-device", `{"server":{"model":"NVIDIA H100 80GB HBM3","count":2,"sharing_mode":"MPS"}}`, &sv)
		if sv.Server.ID != "pod-2" || !slices.Equal(devAddrs(sv.Server.IsolatedDevices), []string{"1b:00.0-0", "1b:00.0-1"}) {
			t.Errorf("model attach answered %+v", sv)
		}
		// Detach by id with climc's index, then detach_all.
		e.mustCall("POST", "/servers/pod-1/detach-isolated-device", `{"server":{"device":"`+devs[0].ID+`","index":0}}`, &sv)
		if !slices.Equal(devAddrs(sv.Server.IsolatedDevices), []string{"1a:00.0-1"}) {
			t.Errorf("detach answered %+v", sv)
		}
		e.mustCall("POST", "/servers/pod-2/detach-isolated-device", `{"server":{"detach_all":true}}`, &sv)
		if len(sv.Server.IsolatedDevices) != 0 {
			t.Errorf("detach_all left %+v", sv)
		}
		// The unwrapped form answers the devices changed, as before.
		var changed api.IsolatedDevicesBody
		e.mustCall("POST", "/servers/pod-1/detach-isolated-device", `{"all":true}`, &changed)
		if !slices.Equal(devAddrs(changed.IsolatedDevices), []string{"1a:00.0-1"}) {
			t.Errorf("unwrapped detach answered %+v", changed)
		}
	})
}

// Unknown fields and parameters are ignored, as Cloudpods ignores them, and
// named in the debug log; bodies must be JSON.
func TestUnknownFieldsIgnoredAndJSONRequired(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		e.seed()
		body := `{"isolated_device":{"host_id":"gpu-1","dev_type":"NVIDIA_MPS","addr":"00:07.0-0","vendor_device_id":"10de:1b38",
			"detected_on_host":true,"pcie_info":{"lane_width":8,"lanes":1}},"extra":1}`
		var db api.IsolatedDeviceBody
		e.mustCall("POST", "/isolated_devices", body, &db)
		if d := db.IsolatedDevice; d.Index != -1 || d.DeviceMinor != -1 || d.NumaNode != 0 || d.PCIEInfo == nil || d.PCIEInfo.LaneWidth != 8 {
			t.Errorf("created %+v: index and device_minor default to -1 and numa_node to 0 (as in Cloudpods), pcie_info kept", d)
		}
		e.mustCall("GET", "/isolated_devices?colour=red&dev_type.0=NVIDIA_MPS", "", nil)
		log := e.log.String()
		for _, want := range []string{"extra", "isolated_device.detected_on_host", "colour"} {
			if !strings.Contains(log, want) {
				t.Errorf("debug log does not name %s:\n%s", want, log)
			}
		}
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", ""} {
			st, b := e.call("PUT", "/isolated_devices/"+db.IsolatedDevice.ID, `{"isolated_device":{"model":"x"}}`, "Content-Type", ct)
			checkError(t, st, b, http.StatusUnsupportedMediaType, api.ClassUnsupportedMediaType, "Content-Type must be application/json")
		}
		if st, b := e.call("PUT", "/isolated_devices/"+db.IsolatedDevice.ID, `{"isolated_device":{"model":"y"}}`, "Content-Type", "application/json; charset=utf-8"); st != http.StatusOK {
			t.Errorf("application/json with a charset: %d %s", st, b)
		}
		// A bodiless request needs no type: climc sends one anyway.
		if st, b := e.call("DELETE", "/isolated_devices/"+db.IsolatedDevice.ID, "", "Content-Type", "text/plain"); st != http.StatusOK {
			t.Errorf("bodiless DELETE: %d %s", st, b)
		}
		if got, _ := e.st.GetDevice(t.Context(), db.IsolatedDevice.ID); got.ID != "" {
			t.Errorf("the DELETE did not delete")
		}
	})
}
