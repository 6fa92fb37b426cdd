package server

import (
	"bytes"
	"io"
	"net/http"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// Requesting and releasing devices, with Cloudpods' paths:
//
//	POST /servers/{guest}/attach-isolated-device  {"device":"<id>"}
//	     or {"dev_type":"NVIDIA_MPS","model":"...","count":2,"host":"...","numa_node":0}
//	POST /servers/{guest}/detach-isolated-device  {"device":"<id>"} or {"all":true}
//	POST /isolated_devices/{id}/purge             {"force":true} (body optional)
//
// Attach and detach answer {"isolated_devices":[...]}, the rows they
// changed (api.IsolatedDevicesBody). {guest} is the id of a container or
// pod; this inventory does not keep guests, it only records who holds a
// device.

// addAllocRoutes adds the attach and detach routes to New's table. (Purge
// is in the table itself.)
func (s *server) addAllocRoutes(routes map[string]handlerFunc) {
	routes["POST /servers/{guest}/attach-isolated-device"] = s.attachDevices
	routes["POST /servers/{guest}/detach-isolated-device"] = s.detachDevices
}

// attachInput is the body of attach: device alone, or the model form.
type attachInput struct {
	Device   *string `json:"device"`
	DevType  *string `json:"dev_type"`
	Model    *string `json:"model"`
	Count    *int    `json:"count"`
	Host     *string `json:"host"`
	NUMANode *int    `json:"numa_node"`
}

type detachInput struct {
	Device *string `json:"device"`
	All    bool    `json:"all"`
}

type purgeInput struct {
	Force bool `json:"force"`
}

func (s *server) attachDevices(w http.ResponseWriter, r *http.Request) error {
	guest, err := guestParam(r)
	if err != nil {
		return err
	}
	var in attachInput
	if err := s.decodeBody(w, r, &in); err != nil {
		return err
	}
	var devs []api.IsolatedDevice
	switch {
	case in.Device != nil:
		if in.DevType != nil || in.Model != nil || in.Count != nil || in.Host != nil || in.NUMANode != nil {
			return badInput("field device: give either device or dev_type/model/count/host/numa_node, not both")
		}
		if *in.Device == "" {
			return badInput("field device: empty")
		}
		d, err := s.st.AttachDevice(r.Context(), guest, *in.Device)
		if err != nil {
			return err
		}
		devs = []api.IsolatedDevice{d}
	case in.Model != nil || in.Host != nil:
		if in.Count != nil && *in.Count == 0 {
			// The store reads 0 as "not sent" (1).
			return badInput("field count: must be between 1 and %d", store.MaxAttachCount)
		}
		req := store.AttachRequest{
			DevType: deref(in.DevType), Model: deref(in.Model), Host: deref(in.Host),
			Count: deref(in.Count), NUMANode: in.NUMANode,
		}
		if devs, err = s.st.AttachDevices(r.Context(), guest, req); err != nil {
			return err
		}
	default:
		return badInput("missing field device, or model and host")
	}
	writeJSON(w, http.StatusOK, api.IsolatedDevicesBody{IsolatedDevices: devs})
	return nil
}

func (s *server) detachDevices(w http.ResponseWriter, r *http.Request) error {
	guest, err := guestParam(r)
	if err != nil {
		return err
	}
	var in detachInput
	if err := s.decodeBody(w, r, &in); err != nil {
		return err
	}
	var devs []api.IsolatedDevice
	switch {
	case in.Device != nil && in.All:
		return badInput("field all: give either device or all, not both")
	case in.Device != nil && *in.Device == "":
		return badInput("field device: empty")
	case in.Device != nil:
		devs, err = s.st.DetachDevice(r.Context(), guest, *in.Device)
	case in.All:
		devs, err = s.st.DetachAll(r.Context(), guest)
	default:
		return badInput("missing field device, or all")
	}
	if err != nil {
		return err
	}
	if devs == nil {
		devs = []api.IsolatedDevice{} // "isolated_devices":[] rather than null
	}
	writeJSON(w, http.StatusOK, api.IsolatedDevicesBody{IsolatedDevices: devs})
	return nil
}

// purgeDevice removes a device like DELETE; with {"force":true} a device a
// guest holds is detached first, and the answer names that guest. The body
// is optional, as Cloudpods' purge takes none.
func (s *server) purgeDevice(w http.ResponseWriter, r *http.Request) error {
	var in purgeInput
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		return s.bodyError(err)
	}
	if len(bytes.TrimSpace(body)) > 0 {
		r.Body = io.NopCloser(bytes.NewReader(body))
		if err := s.decodeBody(w, r, &in); err != nil {
			return err
		}
	}
	if err := s.mayChangeDevice(r, r.PathValue("id"), nil); err != nil {
		return err
	}
	if in.Force {
		if err := s.mayForce(r); err != nil {
			return err
		}
	}
	d, guest, err := s.st.PurgeDevice(r.Context(), r.PathValue("id"), in.Force)
	if err != nil {
		return err
	}
	if guest != "" {
		s.log.Warn("force purge detached an isolated device from its guest", "id", d.ID, "guest_id", guest)
	}
	writeJSON(w, http.StatusOK, api.PurgeBody{IsolatedDevice: d, DetachedGuest: guest})
	return nil
}

// guestParam is the {guest} of the path, checked: 400 naming guest.
func guestParam(r *http.Request) (string, error) {
	g := r.PathValue("guest")
	if err := store.CheckGuestID(g); err != nil {
		return "", badInput("%v", err)
	}
	return g, nil
}
