package server

import (
	"net/http"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
	"yunion.io/x/mps-daemon/tests/pgtest/storetest"
)

// unknownUUID is a well-formed device id no device has.
const unknownUUID = "0b5e5b4e-5d5c-4d6a-9b1a-0c1d2e3f4a5b"

// TestBadInput: the 400s TestErrorAnswers does not cover, on every route
// that takes a body or an id. Each names the field or parameter at fault
// and changes nothing (scopeFixture.as checks).
func TestBadInput(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		f := newScopeFixture(t, open())
		devPath := "/isolated_devices/" + f.free.ID
		big := `{"host":{"name":"` + strings.Repeat("x", 2<<20) + `"}}`
		tests := []struct {
			name, method, path, body string
			details                  string
		}{
			{"device id not a UUID", "GET", "/isolated_devices/nope", "", `path parameter id: "nope" is not an isolated device id`},
			{"device id upper-case", "GET", "/isolated_devices/" + strings.ToUpper(f.free.ID), "", "path parameter id:"},
			{"device id with braces", "GET", "/isolated_devices/{" + f.free.ID + "}", "", "path parameter id:"},
			{"device id without dashes", "GET", "/isolated_devices/" + strings.ReplaceAll(f.free.ID, "-", ""), "", "path parameter id:"},
			{"PUT of a bad id", "PUT", "/isolated_devices/nope", `{"isolated_device":{"model":"x"}}`, `path parameter id: "nope"`},
			{"DELETE of a bad id", "DELETE", "/isolated_devices/00:06.0-0", "", `path parameter id: "00:06.0-0"`},
			{"purge of a bad id", "POST", "/isolated_devices/nope/purge", "", `path parameter id: "nope"`},
			{"host: unknown field", "POST", "/hosts", `{"host":{"name":"h","ip":"1.2.3.4"}}`, `unknown field "ip"`},
			{"host: malformed JSON", "POST", "/hosts", `{"host":{"name":"h"`, "malformed JSON"},
			{"host: wrong type", "PUT", "/hosts/gpu-1", `{"host":{"name":7}}`, "field host.name"},
			{"host: oversized body", "POST", "/hosts", big, "larger than 1048576 bytes"},
			{"host: missing envelope", "PUT", "/hosts/gpu-1", `{}`, "missing field host"},
			{"device PUT: unknown field", "PUT", devPath, `{"isolated_device":{"colour":"red"}}`, `unknown field "colour"`},
			{"device PUT: malformed JSON", "PUT", devPath, `{"isolated_device":`, "malformed JSON"},
			{"device PUT: oversized body", "PUT", devPath, `{"isolated_device":{"model":"` + strings.Repeat("x", 2<<20) + `"}}`, "larger than 1048576 bytes"},
			{"purge: unknown field", "POST", devPath + "/purge", `{"forced":true}`, `unknown field "forced"`},
			{"hosts: text limit", "GET", "/hosts?limit=all", "", "query parameter limit"},
			{"hosts: negative limit", "GET", "/hosts?limit=-2", "", "query parameter limit"},
			{"devices: text offset", "GET", "/isolated_devices?offset=x", "", "query parameter offset"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				f.env.t = t
				status, ae := f.as("admin", tt.method, tt.path, tt.body)
				if status != http.StatusBadRequest || ae.Class != api.ClassInputParameter || !strings.Contains(ae.Details, tt.details) {
					t.Errorf("%d %+v, want 400 %s with details containing %q", status, ae, api.ClassInputParameter, tt.details)
				}
			})
		}
	})
}

// A bad request by a caller who may not make it at all is refused for
// that first: roles are checked before anything is read.
func TestRoleCheckedBeforeInput(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		f := newScopeFixture(t, open())
		for _, req := range []struct{ method, path, body string }{
			{"DELETE", "/isolated_devices/nope", ""},
			{"POST", "/isolated_devices", `{"isolated_device":`},
			{"PUT", "/hosts/gpu-1", `{"bogus":1}`},
		} {
			if status, ae := f.as("viewer", req.method, req.path, req.body); status != http.StatusForbidden {
				t.Errorf("%s %s as viewer: %d %+v, want 403", req.method, req.path, status, ae)
			}
			if status, ae := f.as("none", req.method, req.path, req.body); status != http.StatusUnauthorized {
				t.Errorf("%s %s without token: %d %+v, want 401", req.method, req.path, status, ae)
			}
		}
	})
}
