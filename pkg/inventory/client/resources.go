package client

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"strconv"

	"yunion.io/x/mps-daemon/pkg/api"
)

// ListHostsOptions selects hosts. Limit 0 leaves the page size to the
// server (Cloudpods' 2048).
type ListHostsOptions struct {
	Name          string
	Limit, Offset int
}

// ListOptions selects isolated devices, with mpsctl's options: HostID is a
// host's id or name, GPU the physical GPU (sent as device_path), Unused the
// devices no guest holds, Details asks for the host's name; Unhealthy and
// PendingRemoval, when set, keep the devices whose flag has that value.
// Limit 0 leaves the page size to the server (Cloudpods' 2048). Order is
// "asc" (oldest first, creation order: what "" asks for too) or "desc"
// (newest first, the server's own default, as Cloudpods lists). PagingMarker, when set,
// asks for Cloudpods' marker paging instead of Offset: "" for the first
// page, then the answer's NextMarker until it is "" (see
// api.IsolatedDeviceList); each page then costs the server the same
// however deep it is.
type ListOptions struct {
	HostID, DevType, Model, Addr, GPU, GuestID string
	Order                                      string
	Unused, Details                            bool
	Unhealthy, PendingRemoval                  *bool
	Limit, Offset                              int
	PagingMarker                               *string
	// DevicesVersion, with HostID and the first marker page, asks
	// conditionally (api.ParamDevicesVersion): the answer is
	// DevicesUnchanged while the host's rows are at that version, an
	// answer's DevicesVersion of an earlier list.
	DevicesVersion string
}

func (o ListOptions) query() url.Values {
	q := url.Values{}
	for _, p := range []struct{ name, v string }{
		{"host_id", o.HostID}, {"dev_type", o.DevType}, {"model", o.Model},
		{"addr", o.Addr}, {"device_path", o.GPU}, {"guest_id", o.GuestID}, {"order", cmp.Or(o.Order, "asc")},
	} {
		if p.v != "" {
			q.Set(p.name, p.v)
		}
	}
	if o.Unused {
		q.Set("unused", "true")
	}
	// Always said, as climc says it: a region (and the inventory) answers
	// a list without it with details.
	q.Set("details", strconv.FormatBool(o.Details))
	for _, p := range []struct {
		name string
		v    *bool
	}{{"unhealthy", o.Unhealthy}, {"pending_removal", o.PendingRemoval}} {
		if p.v != nil {
			q.Set(p.name, strconv.FormatBool(*p.v))
		}
	}
	setPage(q, o.Limit, o.Offset)
	if o.PagingMarker != nil {
		q.Set("paging_marker", *o.PagingMarker)
	}
	if o.DevicesVersion != "" {
		q.Set(api.ParamDevicesVersion, o.DevicesVersion)
	}
	return q
}

func setPage(q url.Values, limit, offset int) {
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if offset != 0 {
		q.Set("offset", strconv.Itoa(offset))
	}
}

func devicePath(id string) string { return "/isolated_devices/" + url.PathEscape(id) }

// ListHosts returns one page of hosts.
func (c *Client) ListHosts(ctx context.Context, o ListHostsOptions) (*api.HostList, error) {
	q := url.Values{}
	if o.Name != "" {
		q.Set("name", o.Name)
	}
	setPage(q, o.Limit, o.Offset)
	var list api.HostList
	if err := c.do(ctx, "GET", "/hosts", q, nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// GetHost reads a host by id or name.
func (c *Client) GetHost(ctx context.Context, idOrName string) (api.Host, error) {
	var b api.HostBody
	err := c.do(ctx, "GET", "/hosts/"+url.PathEscape(idOrName), nil, nil, &b)
	return b.Host, err
}

// CreateHost registers a host; the server assigns its id.
func (c *Client) CreateHost(ctx context.Context, h api.Host) (api.Host, error) {
	var b api.HostBody
	err := c.do(ctx, "POST", "/hosts", nil, api.HostBody{Host: h}, &b)
	return b.Host, err
}

// EnsureHost returns the host called name, creating it when missing. When
// another process creates it at the same moment (409), the winner's host is
// read back, so concurrent callers all get the same id.
func (c *Client) EnsureHost(ctx context.Context, name string) (api.Host, error) {
	if h, ok, err := c.hostByName(ctx, name); err != nil || ok {
		return h, err
	}
	h, err := c.CreateHost(ctx, api.Host{Name: name})
	if err == nil {
		c.log.Info("registered host", "host", name, "host_id", h.ID)
		return h, nil
	}
	if !IsConflict(err) {
		return api.Host{}, fmt.Errorf("creating host %s: %w", name, err)
	}
	h, ok, rerr := c.hostByName(ctx, name)
	if rerr != nil {
		return api.Host{}, rerr
	}
	if !ok {
		return api.Host{}, fmt.Errorf("creating host %s: %w (and no host has that name)", name, err)
	}
	return h, nil
}

func (c *Client) hostByName(ctx context.Context, name string) (api.Host, bool, error) {
	list, err := c.ListHosts(ctx, ListHostsOptions{Name: name, Limit: 1})
	if err != nil {
		return api.Host{}, false, fmt.Errorf("looking up host %s: %w", name, err)
	}
	if len(list.Hosts) == 0 {
		return api.Host{}, false, nil
	}
	return list.Hosts[0], true, nil
}

// ListIsolatedDevices returns one page of devices.
func (c *Client) ListIsolatedDevices(ctx context.Context, o ListOptions) (*api.IsolatedDeviceList, error) {
	var list api.IsolatedDeviceList
	if err := c.do(ctx, "GET", "/isolated_devices", o.query(), nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// ListAllIsolatedDevices returns every device o selects, page by page (o's
// Limit the page size, its Offset and PagingMarker ignored): by marker, so
// that rows deleted meanwhile shift nothing, or, from an inventory without
// marker paging (an answer without marker_field), by offset, never listing
// a device twice.
func (c *Client) ListAllIsolatedDevices(ctx context.Context, o ListOptions) ([]api.IsolatedDevice, error) {
	o.DevicesVersion = ""
	w, err := c.listAll(ctx, o)
	return w.devices, err
}

// walk is what listAll found.
type walk struct {
	devices []api.IsolatedDevice
	// version is the host's devices version its first page answered ("":
	// none, from an inventory without them or a list of no one host).
	version string
	// unchanged: o.DevicesVersion was asked and is still the host's; no
	// devices were listed.
	unchanged bool
}

// listAll is ListAllIsolatedDevices asking its first page conditionally
// when o.DevicesVersion is set (an inventory that does not know the
// condition answers the page).
func (c *Client) listAll(ctx context.Context, o ListOptions) (walk, error) {
	var w walk
	seen := map[string]bool{}
	marker := ""
	for o.Offset = 0; ; {
		o.PagingMarker = nil
		if o.Offset == 0 {
			o.PagingMarker = &marker
		}
		page, err := c.ListIsolatedDevices(ctx, o)
		if err != nil {
			return walk{}, err
		}
		if marker == "" && o.Offset == 0 {
			if page.DevicesUnchanged {
				if o.DevicesVersion == "" || page.DevicesVersion != o.DevicesVersion {
					return walk{}, fmt.Errorf("the inventory answered version %q unchanged, asked about %q", page.DevicesVersion, o.DevicesVersion)
				}
				return walk{version: page.DevicesVersion, unchanged: true}, nil
			}
			w.version = page.DevicesVersion
		}
		o.DevicesVersion = "" // the first page only
		for _, d := range page.IsolatedDevices {
			// Rows deleted meanwhile shift offset pages; never count one twice.
			if !seen[d.ID] {
				seen[d.ID] = true
				w.devices = append(w.devices, d)
			}
		}
		switch {
		case page.MarkerField != "":
			if page.NextMarker == "" {
				return w, nil
			}
			marker = page.NextMarker
		case len(page.IsolatedDevices) == 0:
			return w, nil
		default:
			o.Offset += len(page.IsolatedDevices)
			if o.Offset >= page.Total {
				return w, nil
			}
		}
	}
}

// GetIsolatedDevice reads one device.
func (c *Client) GetIsolatedDevice(ctx context.Context, id string) (api.IsolatedDevice, error) {
	var b api.IsolatedDeviceBody
	err := c.do(ctx, "GET", devicePath(id), nil, nil, &b)
	return b.IsolatedDevice, err
}

// CreateIsolatedDevice registers a device; the server assigns its id.
func (c *Client) CreateIsolatedDevice(ctx context.Context, d api.IsolatedDevice) (api.IsolatedDevice, error) {
	var b api.IsolatedDeviceBody
	err := c.do(ctx, "POST", "/isolated_devices", nil, api.IsolatedDeviceBody{IsolatedDevice: d}, &b)
	return b.IsolatedDevice, err
}

// CreateIsolatedDevices registers devs in their order and answers them as
// created. It sends them in one request (POST /isolated_devices with
// {"isolated_devices": [...]}), which the inventory creates all or none in
// one transaction; more than api.MaxCreateDevices go in several requests
// of that many, each all or none. An inventory without the bulk create
// (an mps-inventory older than it, see noBulkCreate) gets them one by one
// as CreateIsolatedDevice sends them, and so does every later call of this
// client. On error it answers the devices created before it (a prefix of
// devs) with the error; a 409 (IsConflict) is a device that exists.
func (c *Client) CreateIsolatedDevices(ctx context.Context, devs []api.IsolatedDevice) ([]api.IsolatedDevice, error) {
	var out []api.IsolatedDevice
	for len(devs) > 0 && !c.noBulk.Load() {
		n := min(len(devs), api.MaxCreateDevices)
		var b api.IsolatedDevicesBody
		err := c.do(ctx, "POST", "/isolated_devices", nil, api.IsolatedDevicesBody{IsolatedDevices: devs[:n]}, &b)
		if noBulkCreate(err) {
			c.noBulk.Store(true)
			c.log.Info("the inventory has no bulk create (an older mps-inventory): creating isolated devices one by one", "answer", err)
			break
		}
		if err != nil {
			return out, err
		}
		if len(b.IsolatedDevices) != n {
			return out, fmt.Errorf("creating %d isolated devices: the inventory answered %d", n, len(b.IsolatedDevices))
		}
		out, devs = append(out, b.IsolatedDevices...), devs[n:]
	}
	for _, d := range devs {
		created, err := c.CreateIsolatedDevice(ctx, d)
		if err != nil {
			return out, err
		}
		out = append(out, created)
	}
	return out, nil
}

// UpdateIsolatedDevice replaces every writable field of device id with d's,
// guest_id included: read the device, change it, send it back. (id, host_id
// and created_at are accepted only unchanged or empty.)
func (c *Client) UpdateIsolatedDevice(ctx context.Context, id string, d api.IsolatedDevice) (api.IsolatedDevice, error) {
	var b api.IsolatedDeviceBody
	err := c.do(ctx, "PUT", devicePath(id), nil, api.IsolatedDeviceBody{IsolatedDevice: d}, &b)
	return b.IsolatedDevice, err
}

// DeleteIsolatedDevice removes a device. A device a guest holds is refused:
// IsDeviceInUse(err) is true.
func (c *Client) DeleteIsolatedDevice(ctx context.Context, id string) error {
	return c.do(ctx, "DELETE", devicePath(id), nil, nil, nil)
}
