package server

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// A host's first marker page answers the version of its rows; the same
// request with that version is answered "unchanged" (no rows) while
// nothing wrote a row of the host, and with the page again after any
// write, by anyone. A version of another host, a stale one or one made
// up never earns "unchanged", and the page is always of the host asked.
func TestConditionalListOfAHost(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		devs := seedGPUs(t, e.st, "gpu-1", 2, 2)
		other := seedGPUs(t, e.st, "gpu-2", 1, 2)
		list := func(host, version string) (api.IsolatedDeviceList, map[string]json.RawMessage) {
			t.Helper()
			q := url.Values{"host": {host}, "paging_marker": {""}, "limit": {"3"}, "details": {"false"}}
			if version != "" {
				q.Set(api.ParamDevicesVersion, version)
			}
			var raw map[string]json.RawMessage
			b := e.mustCall("GET", "/isolated_devices?"+q.Encode(), "", &raw)
			var l api.IsolatedDeviceList
			if err := json.Unmarshal(b, &l); err != nil {
				t.Fatal(err)
			}
			return l, raw
		}
		first, _ := list("gpu-1", "")
		v := first.DevicesVersion
		if v == "" || first.DevicesUnchanged || len(first.IsolatedDevices) != 3 || first.NextMarker == "" {
			t.Fatalf("first page: version %q unchanged %t, %d rows, next %q", v, first.DevicesUnchanged, len(first.IsolatedDevices), first.NextMarker)
		}
		var second api.IsolatedDeviceList
		e.mustCall("GET", "/isolated_devices?host=gpu-1&limit=3&paging_marker="+first.NextMarker, "", &second)
		if second.DevicesVersion != v {
			t.Errorf("the walk's next page answered version %q, the first %q", second.DevicesVersion, v)
		}

		same, raw := list("gpu-1", v)
		if !same.DevicesUnchanged || same.DevicesVersion != v || len(same.IsolatedDevices) != 0 || same.NextMarker != "" {
			t.Fatalf("unchanged host: %+v", same)
		}
		if string(raw["isolated_devices"]) != "[]" {
			t.Errorf("the unchanged answer's isolated_devices is %s, want the empty list", raw["isolated_devices"])
		}
		if byID, _ := list(devs[0].HostID, v); !byID.DevicesUnchanged {
			t.Error("the host named by its id: not unchanged")
		}

		otherV, _ := list("gpu-2", "")
		for _, tt := range []struct{ name, host, version string }{
			{"another host's version", "gpu-1", otherV.DevicesVersion},
			{"this host's version for another host", "gpu-2", v},
			{"a version from the future", "gpu-1", "9223372036854775807"},
		} {
			got, _ := list(tt.host, tt.version)
			want := map[string]int{"gpu-1": len(devs), "gpu-2": len(other)}[tt.host]
			if got.DevicesUnchanged || len(got.IsolatedDevices) != min(3, want) {
				t.Errorf("%s: unchanged %t with %d rows, want the page", tt.name, got.DevicesUnchanged, len(got.IsolatedDevices))
			}
			for _, d := range got.IsolatedDevices {
				if tt.host == "gpu-1" && d.HostID != devs[0].HostID || tt.host == "gpu-2" && d.HostID != other[0].HostID {
					t.Errorf("%s: a row of another host: %+v", tt.name, d)
				}
			}
		}

		// Any write of a row of the host: the page again, at a new version.
		if _, err := e.st.AttachDevice(t.Context(), "pod-1", devs[3].ID); err != nil {
			t.Fatal(err)
		}
		after, _ := list("gpu-1", v)
		if after.DevicesUnchanged || len(after.IsolatedDevices) != 3 || after.DevicesVersion == v || after.DevicesVersion == "" {
			t.Fatalf("after an attach: unchanged %t, %d rows, version %q (was %q)", after.DevicesUnchanged, len(after.IsolatedDevices), after.DevicesVersion, v)
		}
		if again, _ := list("gpu-1", after.DevicesVersion); !again.DevicesUnchanged {
			t.Error("the new version is not answered unchanged")
		}
		if gone, _ := list("gpu-2", otherV.DevicesVersion); !gone.DevicesUnchanged {
			t.Error("a write of gpu-1's rows changed gpu-2's version")
		}
	})
}

// A bad devices_version is a 400 naming the parameter, whatever it holds;
// an unknown host is a 404 as without it.
func TestConditionalListRefusals(t *testing.T) {
	e := newEnvOn(t, storetest.Open(t, storetest.SQLiteDSN(t)), Options{})
	seedGPUs(t, e.st, "gpu-1", 1, 2)
	var first api.IsolatedDeviceList
	e.mustCall("GET", "/isolated_devices?host=gpu-1&paging_marker=", "", &first)
	v := first.DevicesVersion
	for _, tt := range []struct{ name, query, want string }{
		{"empty", "host=gpu-1&paging_marker=&devices_version=", "is not a version"},
		{"not a number", "host=gpu-1&paging_marker=&devices_version=abc", "is not a version"},
		{"negative", "host=gpu-1&paging_marker=&devices_version=-1", "is not a version"},
		{"zero", "host=gpu-1&paging_marker=&devices_version=0", "is not a version"},
		{"a fraction", "host=gpu-1&paging_marker=&devices_version=1.5", "is not a version"},
		{"past int64", "host=gpu-1&paging_marker=&devices_version=9223372036854775808", "is not a version"},
		{"huge", "host=gpu-1&paging_marker=&devices_version=" + strings.Repeat("7", 64<<10), "is not a version"},
		{"twice", "host=gpu-1&paging_marker=&devices_version=" + v + "&devices_version=" + v, "given 2 times"},
		{"no host", "paging_marker=&devices_version=" + v, "only with host"},
		{"offset paging", "host=gpu-1&devices_version=" + v, "only with paging_marker="},
		{"a later page", "host=gpu-1&paging_marker=5&devices_version=" + v, "only with paging_marker="},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, b := e.call("GET", "/isolated_devices?"+tt.query, "")
			var ae api.Error
			_ = json.Unmarshal(b, &ae)
			if status != http.StatusBadRequest || ae.Class != api.ClassInputParameter ||
				!strings.Contains(ae.Details, "query parameter devices_version") || !strings.Contains(ae.Details, tt.want) {
				t.Errorf("%d %.300s; want 400 InputParameterError naming devices_version (%q)", status, b, tt.want)
			}
			if len(b) > 1000 {
				t.Errorf("the refusal echoes %d bytes", len(b))
			}
		})
	}
	if status, b := e.call("GET", "/isolated_devices?host=typo&paging_marker=&devices_version="+v, ""); status != http.StatusNotFound {
		t.Errorf("unknown host: %d %s", status, b)
	}
}
