package server

import (
	"net/http"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// Requesting and releasing devices, with Cloudpods' paths:
//
//	POST /servers/{guest}/attach-isolated-device  {"server": {"device": "<id or name>"}}
//	     or {"server": {"model": "...", "count": 2, "sharing_mode": "...", "host": "...", "numa_node": 0}}
//	POST /servers/{guest}/detach-isolated-device  {"server": {"device": "<id or name>", "index": 0}}
//	     or {"server": {"detach_all": true}}
//	POST /isolated_devices/{id}/purge             {"isolated_device": {"purge": true}} (body optional)
//
// As in Cloudpods, a body wrapped in the resource's keyword ("server",
// "isolated_device") and the same fields unwrapped are one request. The
// answer's shape follows the body's: a wrapped attach or detach (Cloudpods'
// clients) is answered with the server, {"server": {"id", "name",
// "isolated_devices": every device the guest holds afterwards}}; an
// unwrapped one (this project's client, which also sends all, force) with
// the devices the request changed, {"isolated_devices": [...]}
// (api.IsolatedDevicesBody). Purge answers the device as it was
// (api.PurgeBody).
//
// {guest} is the id of a container, pod or server: this inventory does not
// keep guests, it records who holds a device. Where Cloudpods takes the
// guest's host for a model attach, this inventory takes host from the body,
// or the host of the devices the guest already holds, or the only host
// there is. index, is_force, gpu_type and auto_start are accepted and have
// no effect (one row per slice: a device is held once; there is no guest to
// start).

// addAllocRoutes adds the attach and detach routes to New's table. (Purge
// is in the table itself.)
func (s *server) addAllocRoutes(routes map[string]handlerFunc) {
	routes["POST /servers/{guest}/attach-isolated-device"] = s.attachDevices
	routes["POST /servers/{guest}/detach-isolated-device"] = s.detachDevices
}

// attachInput is the body of attach: device alone, or the model form.
type attachInput struct {
	Device      *string `json:"device"`
	DevType     *string `json:"dev_type"`
	Model       *string `json:"model"`
	Count       *int    `json:"count"`
	Host        *string `json:"host"`
	NUMANode    *int    `json:"numa_node"`
	SharingMode *string `json:"sharing_mode"`
	GPUType     *string `json:"gpu_type"`
	AutoStart   *bool   `json:"auto_start"`
}

type detachInput struct {
	Device    *string `json:"device"`
	Index     *int    `json:"index"`
	All       bool    `json:"all"`
	DetachAll bool    `json:"detach_all"`
	IsForce   *bool   `json:"is_force"`
	AutoStart *bool   `json:"auto_start"`
}

type purgeInput struct {
	Force bool `json:"force"`
	Purge bool `json:"purge"`
}

func (s *server) attachDevices(w http.ResponseWriter, r *http.Request) error {
	guest, err := guestParam(r)
	if err != nil {
		return err
	}
	in := &attachInput{}
	wrapped, err := s.decodeWrapped(w, r, "server", in, false)
	if err != nil {
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
		host, err := s.attachHost(r, guest, deref(in.Host))
		if err != nil {
			return err
		}
		req := api.AttachRequest{
			DevType: deref(in.DevType), Model: deref(in.Model), Host: host,
			Count: deref(in.Count), NUMANode: in.NUMANode, SharingMode: deref(in.SharingMode),
		}
		if devs, err = s.st.AttachDevices(r.Context(), guest, req); err != nil {
			return err
		}
	default:
		return badInput("missing field device, or model (and host)")
	}
	if wrapped {
		return s.writeServer(w, r, guest)
	}
	writeJSON(w, http.StatusOK, devicesView{viewDevices(devs)})
	return nil
}

// attachHost is the host of a model attach: the one named, else the host
// of the devices guest holds, else the only host of the inventory.
func (s *server) attachHost(r *http.Request, guest, named string) (string, error) {
	if named != "" {
		return named, nil
	}
	held, err := s.heldBy(r, guest, 1)
	if err != nil {
		return "", err
	}
	if len(held) > 0 {
		return held[0].HostID, nil
	}
	hosts, total, err := s.st.ListHosts(r.Context(), store.HostFilter{Limit: 1})
	if err != nil {
		return "", err
	}
	if total != 1 {
		return "", badInput("missing field host: guest %s holds no device yet, and the inventory has %d hosts", guest, total)
	}
	return hosts[0].ID, nil
}

// writeServer answers a wrapped attach or detach: the guest and every
// device it holds (at most a page of maxLimit).
func (s *server) writeServer(w http.ResponseWriter, r *http.Request, guest string) error {
	held, err := s.heldBy(r, guest, maxLimit)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewServer(guest, held))
	return nil
}

// heldBy returns the first limit devices guest holds, in creation order.
// It reads them as the first marker page, which counts nothing: nothing
// here answers a total.
func (s *server) heldBy(r *http.Request, guest string, limit int) ([]api.IsolatedDevice, error) {
	page, err := s.st.ListDevicesByMarker(r.Context(), store.DeviceFilter{GuestID: guest, Limit: limit}, "", false)
	return page.Devices, err
}

func (s *server) detachDevices(w http.ResponseWriter, r *http.Request) error {
	guest, err := guestParam(r)
	if err != nil {
		return err
	}
	in := &detachInput{}
	wrapped, err := s.decodeWrapped(w, r, "server", in, false)
	if err != nil {
		return err
	}
	all := in.All || in.DetachAll
	var devs []api.IsolatedDevice
	switch {
	case in.Device != nil && all:
		return badInput("field detach_all: give either device or detach_all, not both")
	case in.Device != nil && *in.Device == "":
		return badInput("field device: empty")
	case in.Device != nil:
		devs, err = s.st.DetachDevice(r.Context(), guest, *in.Device)
		if err != nil {
			return err
		}
	case all:
		if devs, err = s.st.DetachAll(r.Context(), guest); err != nil {
			return err
		}
	default:
		return badInput("missing field device, or detach_all")
	}
	if wrapped {
		return s.writeServer(w, r, guest)
	}
	writeJSON(w, http.StatusOK, devicesView{viewDevices(devs)})
	return nil
}

// purgeDevice removes a device like DELETE; with purge (Cloudpods' name,
// climc --purge) or force (this project's client) a device a guest holds is
// detached first, and the answer names that guest. Without, a held device
// is a 400 BadRequestError "Isolated device used by server", as Cloudpods
// answers; its host agent matches that text. The body is optional.
func (s *server) purgeDevice(w http.ResponseWriter, r *http.Request) error {
	in := &purgeInput{}
	if _, err := s.decodeWrapped(w, r, "isolated_device", in, true); err != nil {
		return err
	}
	force := in.Force || in.Purge
	id, err := s.mayChangeDevice(r, r.PathValue("id"), nil)
	if err != nil {
		return err
	}
	if force {
		if err := s.mayForce(r); err != nil {
			return err
		}
	}
	d, guest, err := s.st.PurgeDevice(r.Context(), id, force)
	if err != nil {
		return err
	}
	if guest != "" {
		s.log.Warn("purge detached an isolated device from its guest", "id", d.ID, "guest_id", guest)
	}
	writeJSON(w, http.StatusOK, purgeView{IsolatedDevice: viewDevice(d), DetachedGuest: guest})
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
