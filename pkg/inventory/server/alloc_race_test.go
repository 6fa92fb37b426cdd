package server

import (
	"net/http/httptest"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/alloctest"
	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// The proof (see internal/testsupport/alloctest): hundreds of concurrent attach
// and detach requests at two servers on one database, over loopback, on
// each backend; 24 workers of 16 guests each compete for 32 devices (4 GPUs
// of 8 slices).
func TestConcurrentAttachDetach(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		stores := []*store.Store{open(), open()} // two servers on one database
		var urls []string
		for _, st := range stores {
			srv := httptest.NewServer(New(st, Options{}, nil))
			t.Cleanup(srv.Close)
			urls = append(urls, srv.URL)
		}
		token, _, err := stores[0].CreateToken(t.Context(), store.NewToken{Name: "race", Role: store.RoleAdmin})
		if err != nil {
			t.Fatal(err)
		}
		devs := seedGPUs(t, stores[0], "gpu-1", 4, 8)
		load := alloctest.Load{
			URLs: urls, Token: token, Devices: devs, Host: "gpu-1", Model: devs[0].Model,
			Workers: 24, Rounds: 16,
		}
		alloctest.Run(t, load, func() (map[string]string, error) {
			list, _, err := stores[1].ListDevices(t.Context(), store.DeviceFilter{Limit: 1000})
			if err != nil {
				return nil, err
			}
			final := map[string]string{}
			for _, d := range list {
				final[d.ID] = d.GuestID
			}
			return final, nil
		})
		// The totals (counters kept by the database's triggers, see
		// store's migration 0004) still count the rows.
		for _, f := range []store.DeviceFilter{{}, {Unused: true}, {Models: []string{devs[0].Model}}} {
			f.Limit = 1000
			list, total, err := stores[0].ListDevices(t.Context(), f)
			if err != nil || total != len(list) {
				t.Errorf("%+v: total %d for %d rows (%v)", f, total, len(list), err)
			}
		}
	})
}
