package client

import (
	"context"
	"errors"
	"net/url"
	"syscall"

	"yunion.io/x/mps-daemon/pkg/api"
)

// Requesting and releasing devices for a guest (a container or pod id).
//
// What is retried after a failure that may have reached the server (a lost
// answer, a 5xx) depends on whether sending the request again is safe:
//
//   - attach by id: yes. Attaching a device the guest already holds answers
//     it as attached, so a second try gets the same answer.
//   - detach, by id or all: the state is safe (a free device detaches as a
//     no-op), but the answer of the second try lists only what that try
//     released: the devices a lost first answer released are missing from
//     it. The callers want the state, so these are retried.
//   - attach by model: no. A second try would pick more devices for the
//     guest. It is retried only when the connection was refused, which
//     proves the request never reached a server; on any other failure the
//     caller must look (ListIsolatedDevices with GuestID) before trying
//     again.
//   - force purge: no, likewise: the first try may have deleted the device,
//     and the second would answer 404 without saying which guest the first
//     detached.

// attachBody is the body of attach: one device, or the model form.
type attachBody struct {
	Device   string `json:"device,omitempty"`
	DevType  string `json:"dev_type,omitempty"`
	Model    string `json:"model,omitempty"`
	Count    int    `json:"count,omitempty"`
	Host     string `json:"host,omitempty"`
	NUMANode *int   `json:"numa_node,omitempty"`
	// SharingMode is sent only when set.
	SharingMode string `json:"sharing_mode,omitempty"`
}

type detachBody struct {
	Device string `json:"device,omitempty"`
	All    bool   `json:"all,omitempty"`
}

func serverPath(guest, action string) string {
	return "/servers/" + url.PathEscape(guest) + "/" + action
}

// AttachIsolatedDevice gives device id to guest and returns it. A device
// the guest already holds is answered as attached; one another guest
// holds, or that is unhealthy or pending removal, is refused (IsRefused).
func (c *Client) AttachIsolatedDevice(ctx context.Context, guest, id string) ([]api.IsolatedDevice, error) {
	var out api.IsolatedDevicesBody
	err := c.do(ctx, "POST", serverPath(guest, "attach-isolated-device"), nil, attachBody{Device: id}, &out)
	return out.IsolatedDevices, err
}

// AttachIsolatedDevices gives guest r.Count devices picked by the server,
// all or none; not enough free devices is refused (IsRefused), saying how
// many are free. It is not retried once the request may have reached the server
// (see above).
func (c *Client) AttachIsolatedDevices(ctx context.Context, guest string, r api.AttachRequest) ([]api.IsolatedDevice, error) {
	var out api.IsolatedDevicesBody
	body := attachBody{DevType: r.DevType, Model: r.Model, Count: r.Count, Host: r.Host, NUMANode: r.NUMANode, SharingMode: r.SharingMode}
	err := c.doUnrepeatable(ctx, "POST", serverPath(guest, "attach-isolated-device"), body, &out)
	return out.IsolatedDevices, err
}

// DetachIsolatedDevice takes device id back from guest. It returns the
// device, or nothing when it was free already; a device another guest
// holds is refused (IsRefused).
func (c *Client) DetachIsolatedDevice(ctx context.Context, guest, id string) ([]api.IsolatedDevice, error) {
	var out api.IsolatedDevicesBody
	err := c.do(ctx, "POST", serverPath(guest, "detach-isolated-device"), nil, detachBody{Device: id}, &out)
	return out.IsolatedDevices, err
}

// DetachAll takes back every device guest holds and returns them.
func (c *Client) DetachAll(ctx context.Context, guest string) ([]api.IsolatedDevice, error) {
	var out api.IsolatedDevicesBody
	err := c.do(ctx, "POST", serverPath(guest, "detach-isolated-device"), nil, detachBody{All: true}, &out)
	return out.IsolatedDevices, err
}

// PurgeIsolatedDevice removes a device and returns it as it was. A device a
// guest holds is refused (IsDeviceInUse) unless force is set: then it is
// detached and removed, and detachedGuest names the guest it was taken
// from. It is not retried once the request may have reached the server.
func (c *Client) PurgeIsolatedDevice(ctx context.Context, id string, force bool) (dev api.IsolatedDevice, detachedGuest string, err error) {
	var in any // no body without force, as Cloudpods' purge
	if force {
		in = struct {
			Force bool `json:"force"`
		}{true}
	}
	var out api.PurgeBody
	err = c.doUnrepeatable(ctx, "POST", devicePath(id)+"/purge", in, &out)
	return out.IsolatedDevice, out.DetachedGuest, err
}

// doUnrepeatable sends a request that must not be sent twice: a failure is
// retried only when the connection was refused (nothing was sent).
func (c *Client) doUnrepeatable(ctx context.Context, method, path string, in, out any) error {
	return c.doRetrying(ctx, notSent, method, path, nil, in, out)
}

// notSent: the connection was refused, so the request never left.
func notSent(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
