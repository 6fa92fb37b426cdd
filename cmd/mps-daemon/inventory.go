package main

import (
	"fmt"
	"log/slog"
	"strings"

	"yunion.io/x/mps-daemon/pkg/agent"
	"yunion.io/x/mps-daemon/pkg/backend"
	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/inventory/client"
	"yunion.io/x/mps-daemon/pkg/keystone"
	"yunion.io/x/mps-daemon/pkg/pci"
	"yunion.io/x/mps-daemon/pkg/region"
)

// inventory is the backend host.conf chooses (config.HostConf.Backend): the
// Cloudpods region of its auth_url, or mps-inventory at mps_inventory_url.
// where says which, for the start line.
func inventory(cfg *agent.Config, log *slog.Logger) (inv backend.RowStore, where string, err error) {
	hc := cfg.Host
	if hc.Backend() == config.BackendRegion {
		b, err := regionBackend(hc, log)
		if err != nil {
			return nil, "", err
		}
		return b, "cloudpods region via keystone " + hc.Cloudpods.AuthURL, nil
	}
	token, err := hc.TokenValue()
	if err != nil {
		return nil, "", err
	}
	tls := hc.InventoryTLS()
	if tls.Configured() && !strings.HasPrefix(strings.ToLower(hc.InventoryURL), "https://") {
		log.Warn("mps_inventory_ca_file or mps_inventory_cert_file is set but mps_inventory_url is not https://: the inventory is reached in plain HTTP, nothing is verified", "url", hc.InventoryURL)
	}
	c := client.New(client.Options{URL: hc.InventoryURL, Token: token, TokenSource: hc.TokenValue, Timeout: hc.InventoryTimeout,
		HTTPClient: tls.HTTPClient(), Log: log.With("component", "inventory")})
	return c, "mps-inventory " + hc.InventoryURL, nil
}

func regionBackend(hc *config.HostConf, log *slog.Logger) (*region.Backend, error) {
	cp, err := hc.CloudpodsSettings()
	if err != nil {
		return nil, err
	}
	if hc.RegionInsecureTLS {
		log.Warn("mps_region_insecure_tls: the certificates of keystone and the region are NOT checked")
	}
	ca, err := cp.CACerts()
	if err != nil {
		return nil, err
	}
	httpc, err := keystone.NewHTTPClient(ca, hc.RegionInsecureTLS)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cp.SSLCACerts, err)
	}
	ks, err := keystone.New(keystone.Options{
		Credentials: keystone.Credentials{
			AuthURL: cp.AuthURL, User: cp.AdminUser, Password: cp.AdminPassword, UserDomain: cp.AdminDomain,
			Project: cp.AdminProject, ProjectDomain: cp.AdminProjectDomain, Region: cp.Region, Interface: cp.SessionEndpointType,
		},
		HTTP: httpc, Timeout: hc.InventoryTimeout, Log: log.With("component", "keystone"),
	})
	if err != nil {
		return nil, err
	}
	nics := func() ([]region.NIC, error) {
		if hc.RegionHostMAC == "" {
			return region.MachineNICs(cp.ListenInterface)
		}
		// The MAC host.conf names; its IP when an interface of ours has it.
		nic := region.NIC{Name: "mps_region_host_mac", MAC: hc.RegionHostMAC}
		if all, err := region.MachineNICs(""); err == nil {
			for _, n := range all {
				if strings.EqualFold(n.MAC, nic.MAC) {
					nic = n
				}
			}
		}
		return []region.NIC{nic}, nil
	}
	models, err := pci.LoadModels("")
	if err != nil {
		log.Warn("no pci.ids database: GPU models are registered by the driver's name, while Cloudpods' host agent uses lspci's (install pci.ids or hwdata)", "err", err)
		models = nil
	}
	return region.New(region.Options{
		Keystone: ks, HTTP: httpc, Timeout: hc.InventoryTimeout, NICs: nics, Models: models,
		CreateHost: hc.RegionCreateHost, Model: regionModel(hc.RegionDeviceModel), Log: log.With("component", "region"),
	})
}

// regionModel is mps_region_device_model in the region backend's names
// (config and region may not import each other); auto leaves it to probe
// the region.
func regionModel(v string) string {
	switch v {
	case config.DeviceModelGPU:
		return region.ModelGPU
	case config.DeviceModelPerSlice:
		return region.ModelPerSlice
	}
	return ""
}
