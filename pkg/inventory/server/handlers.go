package server

import (
	"net/http"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// Answers are 200 with the resource's envelope, as Cloudpods answers,
// creates included; DELETE and purge answer with the resource as it was.

func (s *server) listHosts(w http.ResponseWriter, r *http.Request) error {
	f, err := hostFilter(r.URL.Query())
	if err != nil {
		return err
	}
	hosts, total, err := s.st.ListHosts(r.Context(), f)
	if err != nil {
		return err
	}
	if hosts == nil {
		hosts = []api.Host{} // "hosts":[] rather than null
	}
	writeJSON(w, http.StatusOK, api.HostList{Hosts: hosts, Total: total, Limit: f.Limit, Offset: f.Offset})
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
	if err := s.mayRegisterHost(r, body.Host.Name); err != nil {
		return err
	}
	h, err := s.st.CreateHost(r.Context(), body.Host.create())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.HostBody{Host: h})
	return nil
}

func (s *server) getHost(w http.ResponseWriter, r *http.Request) error {
	h, err := s.st.GetHost(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.HostBody{Host: h})
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
	h, err := s.st.UpdateHost(r.Context(), r.PathValue("id"), body.Host.update())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.HostBody{Host: h})
	return nil
}

func (s *server) deleteHost(w http.ResponseWriter, r *http.Request) error {
	h, err := s.st.DeleteHost(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.HostBody{Host: h})
	return nil
}

func (s *server) listDevices(w http.ResponseWriter, r *http.Request) error {
	f, err := deviceFilter(r.URL.Query())
	if err != nil {
		return err
	}
	marker, byMarker, desc, err := markerPaging(r.URL.Query())
	if err != nil {
		return err
	}
	if byMarker {
		return s.listDevicesByMarker(w, r, f, marker, desc)
	}
	devs, total, err := s.st.ListDevices(r.Context(), f)
	if err != nil {
		return err
	}
	if devs == nil {
		devs = []api.IsolatedDevice{}
	}
	writeJSON(w, http.StatusOK, api.IsolatedDeviceList{IsolatedDevices: devs, Total: total, Limit: f.Limit, Offset: f.Offset})
	return nil
}

// listDevicesByMarker answers a marker page as Cloudpods does: no total
// or offset, the next page's marker ("" after the last), what it orders by.
func (s *server) listDevicesByMarker(w http.ResponseWriter, r *http.Request, f store.DeviceFilter, marker string, desc bool) error {
	page, err := s.st.ListDevicesByMarker(r.Context(), f, marker, desc)
	if err != nil {
		return err
	}
	out := api.IsolatedDeviceMarkerList{
		IsolatedDevices: page.Devices, Limit: f.Limit, NextMarker: page.NextMarker,
		MarkerField: "seq", MarkerOrder: "ASC",
	}
	if desc {
		out.MarkerOrder = "DESC"
	}
	if out.IsolatedDevices == nil {
		out.IsolatedDevices = []api.IsolatedDevice{}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *server) createDevice(w http.ResponseWriter, r *http.Request) error {
	in, err := s.deviceInput(w, r)
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
	writeJSON(w, http.StatusOK, api.IsolatedDeviceBody{IsolatedDevice: d})
	return nil
}

func (s *server) getDevice(w http.ResponseWriter, r *http.Request) error {
	details, err := parseBool(r.URL.Query(), "details")
	if err != nil {
		return err
	}
	d, err := s.st.GetDevice(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	if details {
		h, err := s.st.GetHost(r.Context(), d.HostID)
		if err != nil {
			return err
		}
		d.Host = h.Name
	}
	writeJSON(w, http.StatusOK, api.IsolatedDeviceBody{IsolatedDevice: d})
	return nil
}

func (s *server) updateDevice(w http.ResponseWriter, r *http.Request) error {
	in, err := s.deviceInput(w, r)
	if err != nil {
		return err
	}
	if err := s.mayChangeDevice(r, r.PathValue("id"), in); err != nil {
		return err
	}
	u, err := in.update()
	if err != nil {
		return err
	}
	d, err := s.st.UpdateDevice(r.Context(), r.PathValue("id"), u)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.IsolatedDeviceBody{IsolatedDevice: d})
	return nil
}

// deleteDevice serves DELETE: a device held by a guest is refused with 409
// "Isolated device used by server" (only purge may force, see alloc.go).
func (s *server) deleteDevice(w http.ResponseWriter, r *http.Request) error {
	if err := s.mayChangeDevice(r, r.PathValue("id"), nil); err != nil {
		return err
	}
	d, err := s.st.DeleteDevice(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.IsolatedDeviceBody{IsolatedDevice: d})
	return nil
}

func (s *server) deviceInput(w http.ResponseWriter, r *http.Request) (*deviceInput, error) {
	var body deviceBody
	if err := s.decodeBody(w, r, &body); err != nil {
		return nil, err
	}
	if body.IsolatedDevice == nil {
		return nil, badInput("missing field isolated_device")
	}
	return body.IsolatedDevice, nil
}
