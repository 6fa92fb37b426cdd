package server

import (
	"bytes"
	"net/http"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// Answers are 200 with the resource's envelope, as Cloudpods answers,
// creates included; DELETE and purge answer with the resource as it was.
// A device in a path is its id or its name (see store.GetDevice). An
// unknown one is a 404, so climc, which tries a name as an id first, goes
// on to look it up by name.

func (s *server) listHosts(w http.ResponseWriter, r *http.Request) error {
	q := parseParams(r.URL.Query())
	s.logUnknownParams(r, q, hostQueryParams)
	f, err := hostFilter(q.Values)
	if err != nil {
		return err
	}
	hosts, total, err := s.st.ListHosts(r.Context(), f)
	if err != nil {
		return err
	}
	out := hostListView{Hosts: make([]hostView, len(hosts))}
	for i, h := range hosts {
		out.Hosts[i] = viewHost(h)
	}
	if total > 0 {
		out.Total, out.Limit, out.Offset = total, answerLimit(q.Values, total), f.Offset
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *server) createHost(w http.ResponseWriter, r *http.Request) error {
	var body hostBody
	if err := s.decodeBody(w, r, &body); err != nil {
		return err
	}
	if body.Host == nil {
		return badInput("missing field host")
	}
	if err := s.mayRegisterHost(r, body.Host.name()); err != nil {
		return err
	}
	h, err := s.st.CreateHost(r.Context(), body.Host.create())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, hostBodyView{viewHost(h)})
	return nil
}

func (s *server) getHost(w http.ResponseWriter, r *http.Request) error {
	h, err := s.st.GetHost(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, hostBodyView{viewHost(h)})
	return nil
}

func (s *server) updateHost(w http.ResponseWriter, r *http.Request) error {
	var body hostBody
	if err := s.decodeBody(w, r, &body); err != nil {
		return err
	}
	if body.Host == nil {
		return badInput("missing field host")
	}
	if err := s.mayUpdateHost(r, r.PathValue("id"), body.Host); err != nil {
		return err
	}
	h, err := s.st.UpdateHost(r.Context(), r.PathValue("id"), body.Host.update())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, hostBodyView{viewHost(h)})
	return nil
}

func (s *server) deleteHost(w http.ResponseWriter, r *http.Request) error {
	h, err := s.st.DeleteHost(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, hostBodyView{viewHost(h)})
	return nil
}

func (s *server) listDevices(w http.ResponseWriter, r *http.Request) error {
	q := parseParams(r.URL.Query())
	s.logUnknownParams(r, q, deviceQueryParams)
	f, err := deviceFilter(q)
	if err != nil {
		return err
	}
	marker, byMarker, desc, err := markerPaging(q.Values)
	if err != nil {
		return err
	}
	version, err := devicesVersionParam(q.Values, f, byMarker, marker)
	if err != nil {
		return err
	}
	if version != 0 {
		if done, err := s.unchanged(w, r, f, version, desc); done || err != nil {
			return err
		}
	}
	if byMarker {
		return s.listDevicesByMarker(w, r, f, marker, desc)
	}
	devs, total, err := s.st.ListDevices(r.Context(), f)
	if err != nil {
		return err
	}
	out := deviceListView{IsolatedDevices: viewDevices(devs)}
	if total > 0 {
		out.Total, out.Limit, out.Offset = total, answerLimit(q.Values, total), f.Offset
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// listDevicesByMarker answers a marker page as Cloudpods does: no total
// or offset, the next page's marker ("" after the last), what it orders by.
func (s *server) listDevicesByMarker(w http.ResponseWriter, r *http.Request, f store.DeviceFilter, marker string, desc bool) error {
	page, err := s.st.ListDevicesByMarker(r.Context(), f, marker, desc)
	if err != nil {
		return err
	}
	out := deviceMarkerListView{
		IsolatedDevices: viewDevices(page.Devices), Limit: f.Limit, NextMarker: page.NextMarker,
		MarkerField: "seq", MarkerOrder: markerOrder(desc),
		HostDevicesVersion: api.HostDevicesVersion{DevicesVersion: formatVersion(page.HostVersion)},
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// createDevice serves POST /isolated_devices: one device, or a list of
// them (the bulk create, bulk.go).
func (s *server) createDevice(w http.ResponseWriter, r *http.Request) error {
	b, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	if list, ok := bulkList(b); ok {
		return s.createDevices(w, r, b, list)
	}
	in, err := s.deviceInputOf(r, b)
	if err != nil {
		return err
	}
	if err := s.mayCreateDevice(r, in); err != nil {
		return err
	}
	d, err := in.create()
	if err != nil {
		return err
	}
	if d, err = s.st.CreateDevice(r.Context(), d); err != nil {
		return err
	}
	writeDevice(w, d)
	return nil
}

// getDevice answers a device with its details (host, vendor, guest), as a
// Cloudpods show always has them.
func (s *server) getDevice(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseBool(r.URL.Query(), "details"); err != nil {
		return err
	}
	d, err := s.st.GetDevice(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeDevice(w, d)
	return nil
}

// writeDevice answers d, read with its details.
func writeDevice(w http.ResponseWriter, d api.IsolatedDevice) {
	writeJSON(w, http.StatusOK, deviceBodyView{viewDevice(d)})
}

func (s *server) updateDevice(w http.ResponseWriter, r *http.Request) error {
	in, err := s.deviceInput(w, r)
	if err != nil {
		return err
	}
	id, err := s.mayChangeDevice(r, r.PathValue("id"), in)
	if err != nil {
		return err
	}
	u, err := in.update()
	if err != nil {
		return err
	}
	d, err := s.st.UpdateDevice(r.Context(), id, u)
	if err != nil {
		return err
	}
	writeDevice(w, d)
	return nil
}

// deleteDevice serves DELETE: a device held by a guest is refused with 406
// NotEmptyError "Isolated device used by server", as Cloudpods refuses it
// (only purge may force, see alloc.go).
func (s *server) deleteDevice(w http.ResponseWriter, r *http.Request) error {
	id, err := s.mayChangeDevice(r, r.PathValue("id"), nil)
	if err != nil {
		return err
	}
	d, err := s.st.DeleteDevice(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, deviceBodyView{viewDevice(d)})
	return nil
}

func (s *server) deviceInput(w http.ResponseWriter, r *http.Request) (*deviceInput, error) {
	b, err := s.readBody(w, r)
	if err != nil {
		return nil, err
	}
	return s.deviceInputOf(r, b)
}

// deviceInputOf reads the body b of a request about one device.
func (s *server) deviceInputOf(r *http.Request, b []byte) (*deviceInput, error) {
	var body deviceBody
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, badInput("request body is empty")
	}
	if err := s.decodeJSON(r, b, &body); err != nil {
		return nil, err
	}
	if body.IsolatedDevice == nil {
		return nil, badInput("missing field isolated_device")
	}
	return body.IsolatedDevice, nil
}

// logUnknownParams names, at debug, the query parameters of r (read as q)
// that the route ignores.
func (s *server) logUnknownParams(r *http.Request, q params, known []string) {
	if unknown := q.unknown(known); len(unknown) > 0 {
		s.log.Debug("ignoring unknown query parameters", "method", r.Method, "path", r.URL.Path, "parameters", unknown)
	}
}
