package region

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"yunion.io/x/mps-daemon/pkg/api"
)

// ErrNoHostRecord: the region keeps no host record for this machine yet.
// Cloudpods' host agent creates it at its first start; the daemon waits for
// it (or, with mps_region_create_host, creates one itself).
var ErrNoHostRecord = errors.New("the Cloudpods region has no host record for this machine")

// NIC is one network interface the host may be known by.
type NIC struct {
	Name string
	MAC  string
	IP   string // first IPv4 address; empty when none
}

// hostRecord is what is read of a host.
type hostRecord struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	AccessIP string `json:"access_ip"`
	HostType string `json:"host_type"`
}

// EnsureHost finds the host record Cloudpods keeps for this machine the way
// its host agent does: by MAC (`GET /hosts?any_mac=<mac>&scope=system`), one
// candidate MAC after another. The name is used only for a record created
// here (mps_region_create_host); the region's own name is returned. Two
// records for one MAC, or different records for two MACs, are an error:
// the daemon never guesses which host it is.
func (b *Backend) EnsureHost(ctx context.Context, name string) (api.Host, error) {
	nics, err := b.nics()
	if err != nil {
		return api.Host{}, fmt.Errorf("listing this machine's network interfaces: %w", err)
	}
	if len(nics) == 0 {
		return api.Host{}, errors.New("no network interface with a MAC address to find the host record by (set listen_interface or mps_region_host_mac)")
	}
	var found *hostRecord
	var foundMAC string
	var macs []string
	for _, nic := range nics {
		macs = append(macs, nic.MAC)
		var list struct {
			Hosts []hostRecord `json:"hosts"`
		}
		if err := b.c.call(ctx, http.MethodGet, pathHosts, byMACQuery(nic.MAC), nil, &list); err != nil {
			return api.Host{}, fmt.Errorf("looking up the host record by MAC %s: %w", nic.MAC, err)
		}
		switch {
		case len(list.Hosts) > 1:
			return api.Host{}, fmt.Errorf("%d host records match MAC %s (%s): resolve the duplicate in the region", len(list.Hosts), nic.MAC, hostNames(list.Hosts))
		case len(list.Hosts) == 1 && found == nil:
			found, foundMAC = &list.Hosts[0], nic.MAC
		case len(list.Hosts) == 1 && list.Hosts[0].ID != found.ID:
			return api.Host{}, fmt.Errorf("MAC %s belongs to host record %s and MAC %s to %s: set mps_region_host_mac to the one of this machine",
				foundMAC, found.Name, nic.MAC, list.Hosts[0].Name)
		}
	}
	if found != nil {
		if found.HostType != "" && found.HostType != "container" {
			b.log.Warn("the host record is not of host_type container: Cloudpods' host agent offers MPS devices to containers only", "host", found.Name, "host_type", found.HostType)
		}
		return api.Host{ID: found.ID, Name: found.Name, AccessIP: found.AccessIP, HostType: found.HostType}, nil
	}
	if !b.o.CreateHost {
		return api.Host{}, fmt.Errorf("%w (looked up by MAC %s): start Cloudpods' host agent on it first, which registers it; or, on a host without one, set mps_region_create_host: true",
			ErrNoHostRecord, strings.Join(macs, ", "))
	}
	return b.createHost(ctx, name, nics)
}

const pathHosts = "/hosts"

// byMACQuery finds the host records with a NIC of mac.
func byMACQuery(mac string) url.Values {
	return url.Values{"any_mac": {mac}, "scope": {"system"}, "limit": {"0"}}
}

func hostNames(hs []hostRecord) string {
	var names []string
	for _, h := range hs {
		names = append(names, h.Name+" "+h.ID)
	}
	return strings.Join(names, ", ")
}

// createHost registers this machine as Cloudpods' host agent does on its
// first start: the zone from the network that holds the access IP (`GET
// /networks?ip=`, its wire's zone), then `POST /zones/<zone>/hosts` with
// host_type container. Only for hosts without a Cloudpods host agent.
func (b *Backend) createHost(ctx context.Context, name string, nics []NIC) (api.Host, error) {
	var nic NIC
	for _, n := range nics {
		if n.IP != "" {
			nic = n
			break
		}
	}
	if nic.IP == "" {
		return api.Host{}, fmt.Errorf("creating a host record: no interface with an IPv4 address among %d (set listen_interface)", len(nics))
	}
	var nets struct {
		Networks []struct {
			ID     string `json:"id"`
			WireID string `json:"wire_id"`
		} `json:"networks"`
	}
	if err := b.c.call(ctx, http.MethodGet, "/networks", url.Values{"ip": {nic.IP}, "scope": {"system"}}, nil, &nets); err != nil {
		return api.Host{}, fmt.Errorf("creating a host record: finding the network of %s: %w", nic.IP, err)
	}
	if len(nets.Networks) == 0 {
		return api.Host{}, fmt.Errorf("creating a host record: no network of the region holds %s (create one on the host's wire first)", nic.IP)
	}
	var wire struct {
		Wire struct {
			ZoneID string `json:"zone_id"`
		} `json:"wire"`
	}
	if err := b.c.call(ctx, http.MethodGet, "/wires/"+url.PathEscape(nets.Networks[0].WireID), nil, nil, &wire); err != nil {
		return api.Host{}, fmt.Errorf("creating a host record: reading wire %s: %w", nets.Networks[0].WireID, err)
	}
	body := map[string]any{"host": map[string]any{
		"name": name, "hostname": name, "access_ip": nic.IP, "access_mac": nic.MAC,
		"host_type": "container", "manager_uri": "http://" + net.JoinHostPort(nic.IP, "8885"),
		"version": "yunion-mps-daemon",
	}}
	var out struct {
		Host hostRecord `json:"host"`
	}
	if err := b.c.call(ctx, http.MethodPost, "/zones/"+url.PathEscape(wire.Wire.ZoneID)+"/hosts", nil, body, &out); err != nil {
		return api.Host{}, fmt.Errorf("creating host record %s (MAC %s, IP %s): %w", name, nic.MAC, nic.IP, err)
	}
	b.log.Info("created a host record in the region (mps_region_create_host)", "host", out.Host.Name, "host_id", out.Host.ID, "mac", nic.MAC, "ip", nic.IP)
	return api.Host{ID: out.Host.ID, Name: out.Host.Name, AccessIP: nic.IP, HostType: "container"}, nil
}

// MachineNICs lists the interfaces the host record may be found by, as
// Cloudpods' host agent would: listen_interface alone when set, else every
// interface that is up, not loopback and has a MAC, by name.
func MachineNICs(listenInterface string) ([]NIC, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var out []NIC
	for _, i := range ifs {
		if listenInterface != "" && i.Name != listenInterface {
			continue
		}
		if listenInterface == "" && (i.Flags&net.FlagLoopback != 0 || i.Flags&net.FlagUp == 0) {
			continue
		}
		if len(i.HardwareAddr) == 0 {
			continue
		}
		nic := NIC{Name: i.Name, MAC: i.HardwareAddr.String()}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				nic.IP = ipn.IP.String()
				break
			}
		}
		out = append(out, nic)
	}
	if listenInterface != "" && len(out) == 0 {
		return nil, fmt.Errorf("listen_interface %s: no such interface with a MAC address", listenInterface)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}
