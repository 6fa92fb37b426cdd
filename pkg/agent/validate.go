package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/gpu"
	"yunion.io/x/mps-daemon/pkg/metrics"
	"yunion.io/x/mps-daemon/pkg/plan"
)

// Validate is the one validation of a configuration, whichever way it
// arrives: at start (cmd/mps-daemon, before anything is started or
// wired), by `mps-daemon check-config` (CheckConfig) and on every reload,
// where it sees the files as they are, restart-only keys included, before
// the running values of those are put back (reload.go): what the next
// start would refuse is refused by the reload already. The files were
// checked when read (LoadConfig: every check that needs neither the GPUs
// nor the machine, in pkg/config); Validate makes the rest, each of
// validations in turn, and joins what they find. Empty roots are
// host.conf's. mode is where the devices go: what the start of that mode
// reads of host.conf is checked (the Kubernetes mode reads no inventory
// key). It starts nothing and writes nothing. It returns the plan and the
// GPUs it was made against.
func Validate(ctx context.Context, cfg *Config, mode Mode, backend gpu.Backend, sysfsRoot, devRoot string) (*plan.Plan, []gpu.Info, error) {
	gpus, err := backend.Devices(ctx)
	if err != nil {
		return nil, nil, withKind(metrics.ErrorGPU, fmt.Errorf("listing GPUs: %w", err))
	}
	v := &validation{cfg: cfg, mode: mode, gpus: gpus, sysfsRoot: cmp.Or(sysfsRoot, cfg.Host.SysfsRoot), devRoot: cmp.Or(devRoot, cfg.Host.DevRoot)}
	gpu.FillNUMA(v.sysfsRoot, gpus)
	var errs []error
	for _, c := range validations {
		errs = append(errs, c.check(ctx, v))
	}
	return v.plan, gpus, errors.Join(errs...)
}

// validation is what the checks of Validate look at, and the plan the
// first of them makes.
type validation struct {
	cfg                *Config
	mode               Mode
	gpus               []gpu.Info
	sysfsRoot, devRoot string
	plan               *plan.Plan
}

// validations are Validate's checks by name. The test that proves each of
// them refuses at start, in check-config and on a reload
// (tests/e2e/validation_test.go) needs a case for every name here.
var validations = []struct {
	name  string
	check func(context.Context, *validation) error
}{
	{"plan", checkPlan},
	{"inventory token", checkToken},
	{"ssl_ca_certs", checkCACerts},
	{"listen address", checkListenAddress},
	{"web config file", checkWebConfig},
	{"inventory TLS files", checkInventoryTLS},
}

// Validations names Validate's checks, in order (for tests).
func Validations() []string {
	names := make([]string, len(validations))
	for i, c := range validations {
		names[i] = c.name
	}
	return names
}

// checkPlan builds the plan against the GPUs: every device entry names a
// GPU present, N within MPS's client limit, the sockets fit under the pipe
// root (planFor).
func checkPlan(_ context.Context, v *validation) error {
	p, err := planFor(v.cfg, v.gpus, v.sysfsRoot, v.devRoot)
	if err == nil {
		v.plan = p
	}
	return err
}

// checkToken reads the inventory token as the start does when the backend
// is mps-inventory: a token file host.conf names must be readable and
// hold a token. The Kubernetes mode never reads it.
func checkToken(_ context.Context, v *validation) error {
	hc := v.cfg.Host
	if v.mode != ModeCloudpods || hc.Backend() != config.BackendInventory {
		return nil
	}
	if _, err := hc.TokenValue(); err != nil {
		return fmt.Errorf("%s: %w", at(hc, "mps_inventory_token_file"), err)
	}
	return nil
}

// checkCACerts reads ssl_ca_certs as the start does when the backend is
// the Cloudpods region: a readable file with a PEM certificate. The
// Kubernetes mode never reads it.
func checkCACerts(_ context.Context, v *validation) error {
	hc := v.cfg.Host
	if v.mode != ModeCloudpods || hc.Backend() != config.BackendRegion {
		return nil
	}
	cp, err := hc.CloudpodsSettings()
	if err != nil {
		return nil // the file's checks require auth_url for the region backend
	}
	if _, err := cp.CACerts(); err != nil {
		return fmt.Errorf("%s: %w", at(hc, "ssl_ca_certs"), err)
	}
	return nil
}

// checkWebConfig reads mps_web_config_file as the listener will serve it
// (config.HostConf.Listener: its keys, certificate and key, client CAs,
// users), in either mode.
func checkWebConfig(_ context.Context, v *validation) error {
	hc := v.cfg.Host
	if hc.WebConfigFile == "" || hc.ListenAddress == "" {
		return nil
	}
	if _, err := hc.Listener().Check(); err != nil {
		return fmt.Errorf("%s: %w", at(hc, "mps_web_config_file"), err)
	}
	return nil
}

// checkInventoryTLS reads mps_inventory_ca_file and the client
// certificate as a connection to mps-inventory will. The Kubernetes mode
// never reads them.
func checkInventoryTLS(_ context.Context, v *validation) error {
	hc := v.cfg.Host
	if v.mode != ModeCloudpods || hc.Backend() != config.BackendInventory {
		return nil
	}
	if err := hc.InventoryTLS().Check(); err != nil {
		key := "mps_inventory_cert_file" // the errors begin with the setting's name
		if strings.HasPrefix(err.Error(), "mps_inventory_ca_file") {
			key = "mps_inventory_ca_file"
		}
		return fmt.Errorf("%s: %w", at(hc, key), err)
	}
	return nil
}

// resolveTimeout bounds the lookup of a host name in mps_listen_address.
const resolveTimeout = 5 * time.Second

// checkListenAddress refuses a listen address the daemon could not bind
// at start because it is not this machine's ("cannot assign requested
// address"): its host must be empty, a wildcard, a loopback address, an
// address of one of this machine's interfaces, or a name that resolves to
// one. Whether the port is free is only known when binding.
func checkListenAddress(ctx context.Context, v *validation) error {
	hc := v.cfg.Host
	host, _, err := net.SplitHostPort(hc.ListenAddress)
	if err != nil || host == "" {
		return nil // the file's checks refuse a malformed one
	}
	refuse := func(why string) error {
		return &config.Error{File: cmp.Or(hc.Path, "host.conf"), Line: hc.Line("mps_listen_address"), Field: "mps_listen_address",
			Msg: fmt.Sprintf("%s: the daemon could not listen on it", why)}
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = append(addrs, a.WithZone(""))
	} else {
		ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
		defer cancel()
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return refuse(fmt.Sprintf("looking up %s: %v", host, err))
		}
		addrs = ips
	}
	local, err := localAddrs()
	if err != nil {
		return fmt.Errorf("listing this machine's addresses for mps_listen_address: %w", err)
	}
	for _, a := range addrs {
		a = a.Unmap()
		if a.IsUnspecified() || a.IsLoopback() || local[a] {
			return nil
		}
	}
	var shown []string
	for _, a := range addrs {
		shown = append(shown, a.String())
	}
	return refuse(fmt.Sprintf("%s is not an address of this machine", strings.Join(shown, ", ")))
}

// localAddrs are the addresses of this machine's interfaces.
func localAddrs() (map[netip.Addr]bool, error) {
	ifAddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	local := map[netip.Addr]bool{}
	for _, ia := range ifAddrs {
		if p, err := netip.ParsePrefix(ia.String()); err == nil {
			local[p.Addr().Unmap().WithZone("")] = true
		}
	}
	return local, nil
}

// at names host.conf and the line of key in it, for errors that come
// from what key names (a file it points at).
func at(hc *config.HostConf, key string) string {
	file := cmp.Or(hc.Path, "host.conf")
	if l := hc.Line(key); l > 0 {
		return fmt.Sprintf("%s:%d", file, l)
	}
	return file
}
