package server

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// Cloudpods' marker paging: paging_marker ("" first) and next_marker walk
// the list page by page; the answer has the marker fields and no total.
func TestMarkerPaging(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		e := newEnvOn(t, open(), Options{})
		devs := seedGPUs(t, e.st, "gpu-1", 2, 3) // 1a-0..2, 1b-0..2
		want := devAddrs(devs)

		walk := func(t *testing.T, query string) ([]string, []string) {
			t.Helper()
			var got, orders []string
			marker := ""
			for range len(devs) + 1 {
				var raw map[string]json.RawMessage
				b := e.mustCall("GET", "/isolated_devices?limit=4&paging_marker="+marker+query, "", &raw)
				for _, key := range []string{"total", "offset"} {
					if _, ok := raw[key]; ok {
						t.Errorf("marker answer has %s: %s", key, b)
					}
				}
				if _, ok := raw["next_marker"]; !ok {
					t.Errorf("marker answer lacks next_marker: %s", b)
				}
				var page api.IsolatedDeviceList
				if err := json.Unmarshal(b, &page); err != nil {
					t.Fatal(err)
				}
				if page.MarkerField != "seq" || page.Limit != 4 {
					t.Errorf("marker_field %q limit %d: %s", page.MarkerField, page.Limit, b)
				}
				got = append(got, devAddrs(page.IsolatedDevices)...)
				orders = append(orders, page.MarkerOrder)
				if page.NextMarker == "" {
					return got, orders
				}
				marker = page.NextMarker
			}
			t.Fatalf("the walk does not end: %q", got)
			return nil, nil
		}
		if got, orders := walk(t, ""); !slices.Equal(got, want) || !slices.Equal(orders, []string{"ASC", "ASC"}) {
			t.Errorf("ascending walk %q (%q), want %q", got, orders, want)
		}
		slices.Reverse(want)
		if got, orders := walk(t, "&paging_order=DESC"); !slices.Equal(got, want) || !slices.Equal(orders, []string{"DESC", "DESC"}) {
			t.Errorf("descending walk %q (%q), want %q", got, orders, want)
		}
		if got, _ := walk(t, "&gpu=GPU-1&details=true"); !slices.Equal(got, []string{"1b:00.0-0", "1b:00.0-1", "1b:00.0-2"}) {
			t.Errorf("filtered walk %q, want GPU-1's slices", got)
		}

		for _, tt := range []struct{ query, details string }{
			{"?paging_marker=abc", "paging_marker:"},
			{"?paging_marker=&offset=2", "offset: give either offset or paging_marker"},
			{"?paging_marker=&paging_order=sideways", "query parameter paging_order"},
			{"?paging_order=desc", "paging_order: only with paging_marker"},
		} {
			t.Run(tt.query, func(t *testing.T) {
				status, body := e.call("GET", "/isolated_devices"+tt.query, "")
				checkError(t, status, body, http.StatusBadRequest, api.ClassInputParameter, tt.details)
			})
		}
	})
}
