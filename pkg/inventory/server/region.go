package server

import (
	"net/http"

	"yunion.io/x/mps-daemon/pkg/api"
)

// What Cloudpods' host agent looks up before it registers its host: the
// network of its access address, that network's wire, the wire's zone
// (GET /networks?ip=..., GET /wires/<id>, GET /zones/<id>), then its host
// by MAC (GET /hosts?any_mac=...) and, when it has none, POST
// /zones/<zone>/hosts. The inventory has no networks, wires or zones: it
// answers one of each, "default", which holds every address and every
// host, so that conversation reaches host creation. After that the agent
// goes on to metadata, network interfaces and storages, which answer 501
// (see docs/inventory.md): the part that matters here, a host record and
// its isolated devices, is served; a full Cloudpods host agent does not
// complete its registration against this inventory.

// defaultZone names the one network, wire and zone.
const defaultZone = "default"

func (s *server) addRegionRoutes(routes map[string]handlerFunc) {
	routes["GET /zones"] = s.listZones
	routes["GET /zones/{id}"] = s.getZone
	routes["GET /wires/{id}"] = s.getWire
	routes["GET /networks"] = s.listNetworks
	routes["POST /zones/{zone}/hosts"] = s.createZoneHost
}

func zoneObject() map[string]any {
	return map[string]any{
		"id": defaultZone, "name": defaultZone, "status": "enable",
		"cloudregion": "Default", "cloudregion_id": "default",
	}
}

func (s *server) listZones(w http.ResponseWriter, _ *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]any{"zones": []any{zoneObject()}, "total": 1, "limit": maxLimit})
	return nil
}

func (s *server) getZone(w http.ResponseWriter, r *http.Request) error {
	if id := r.PathValue("id"); id != defaultZone {
		return &httpError{http.StatusNotFound, api.ClassNotFound, "zone " + id + " not found (this inventory has one zone: " + defaultZone + ")"}
	}
	writeJSON(w, http.StatusOK, map[string]any{"zone": zoneObject()})
	return nil
}

func (s *server) getWire(w http.ResponseWriter, r *http.Request) error {
	if id := r.PathValue("id"); id != defaultZone {
		return &httpError{http.StatusNotFound, api.ClassNotFound, "wire " + id + " not found (this inventory has one wire: " + defaultZone + ")"}
	}
	writeJSON(w, http.StatusOK, map[string]any{"wire": map[string]any{
		"id": defaultZone, "name": defaultZone, "status": "available", "zone_id": defaultZone, "zone": defaultZone,
	}})
	return nil
}

// listNetworks answers the one network, whatever address was asked for.
func (s *server) listNetworks(w http.ResponseWriter, _ *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]any{"networks": []any{map[string]any{
		"id": defaultZone, "name": defaultZone, "status": "available",
		"wire_id": defaultZone, "wire": defaultZone, "zone_id": defaultZone, "zone": defaultZone,
	}}, "total": 1, "limit": maxLimit})
	return nil
}

// createZoneHost is POST /hosts in the one zone.
func (s *server) createZoneHost(w http.ResponseWriter, r *http.Request) error {
	if z := r.PathValue("zone"); z != defaultZone {
		return &httpError{http.StatusNotFound, api.ClassNotFound, "zone " + z + " not found (this inventory has one zone: " + defaultZone + ")"}
	}
	return s.createHost(w, r)
}
