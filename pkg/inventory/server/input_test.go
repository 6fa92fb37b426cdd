package server

import (
	"net/http"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// unknownUUID is a well-formed device id no device has.
const unknownUUID = "0b5e5b4e-5d5c-4d6a-9b1a-0c1d2e3f4a5b"

// TestBadInput: the refusals TestErrorAnswers does not cover, on every
// route that takes a body or an id. Each names the field or parameter at
// fault and changes nothing (scopeFixture.as checks).
func TestBadInput(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		f := newScopeFixture(t, open())
		devPath := "/isolated_devices/" + f.free.ID
		big := `{"host":{"name":"` + strings.Repeat("x", 2<<20) + `"}}`
		const bad, notFound, tooLarge = http.StatusBadRequest, http.StatusNotFound, http.StatusRequestEntityTooLarge
		tests := []struct {
			name, method, path, body string
			status                   int
			class, details           string
		}{
			// What is not a device's id is looked up as its name (Cloudpods
			// resolves a path so): an unknown one is a 404, never the id of
			// another device.
			{"device by unknown name", "GET", "/isolated_devices/nope", "", notFound, api.ClassNotFound, "isolated_device nope not found"},
			{"device id upper-case", "GET", "/isolated_devices/" + strings.ToUpper(f.free.ID), "", notFound, api.ClassNotFound, "not found"},
			{"device id with braces", "GET", "/isolated_devices/{" + f.free.ID + "}", "", notFound, api.ClassNotFound, "not found"},
			{"device id without dashes", "GET", "/isolated_devices/" + strings.ReplaceAll(f.free.ID, "-", ""), "", notFound, api.ClassNotFound, "not found"},
			{"PUT of an unknown name", "PUT", "/isolated_devices/nope", `{"isolated_device":{"model":"x"}}`, notFound, api.ClassNotFound, "isolated_device nope not found"},
			{"DELETE of an address", "DELETE", "/isolated_devices/00:06.0-0", "", notFound, api.ClassNotFound, "isolated_device 00:06.0-0 not found"},
			{"purge of an unknown name", "POST", "/isolated_devices/nope/purge", "", notFound, api.ClassNotFound, "isolated_device nope not found"},
			{"host: malformed JSON", "POST", "/hosts", `{"host":{"name":"h"`, bad, api.ClassInputParameter, "malformed JSON"},
			{"host: wrong type", "PUT", "/hosts/gpu-1", `{"host":{"name":7}}`, bad, api.ClassInputParameter, "field host.name"},
			{"host: oversized body", "POST", "/hosts", big, tooLarge, api.ClassTooLarge, "larger than 1048576 bytes"},
			{"host: missing envelope", "PUT", "/hosts/gpu-1", `{}`, bad, api.ClassInputParameter, "missing field host"},
			{"device PUT: malformed JSON", "PUT", devPath, `{"isolated_device":`, bad, api.ClassInputParameter, "malformed JSON"},
			{"device PUT: oversized body", "PUT", devPath, `{"isolated_device":{"model":"` + strings.Repeat("x", 2<<20) + `"}}`, tooLarge, api.ClassTooLarge, "larger than 1048576 bytes"},
			{"hosts: text limit", "GET", "/hosts?limit=all", "", bad, api.ClassInputParameter, "query parameter limit"},
			{"hosts: negative limit", "GET", "/hosts?limit=-2", "", bad, api.ClassInputParameter, "query parameter limit"},
			{"devices: text offset", "GET", "/isolated_devices?offset=x", "", bad, api.ClassInputParameter, "query parameter offset"},
			{"devices: bad order", "GET", "/isolated_devices?order=up", "", bad, api.ClassInputParameter, "query parameter order"},
			{"devices: unsortable order_by", "GET", "/isolated_devices?order_by=model", "", bad, api.ClassInputParameter, "query parameter order_by"},
			{"devices: numa_node not a number", "GET", "/isolated_devices?numa_node.0=x", "", bad, api.ClassInputParameter, "query parameter numa_node"},
			{"devices: index not a number", "GET", "/isolated_devices?index=x", "", bad, api.ClassInputParameter, "query parameter index"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				f.env.t = t
				status, ae := f.as("admin", tt.method, tt.path, tt.body)
				if status != tt.status || ae.Class != tt.class || !strings.Contains(ae.Details, tt.details) {
					t.Errorf("%d %+v, want %d %s with details containing %q", status, ae, tt.status, tt.class, tt.details)
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
