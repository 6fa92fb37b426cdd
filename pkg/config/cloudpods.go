package config

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"

	"go.yaml.in/yaml/v3"

	"yunion.io/x/mps-daemon/pkg/restcall"
)

// Cloudpods holds the host.conf keys Cloudpods' own services read for their
// admin session with keystone, which every Cloudpods host.conf already has.
// The daemon reads them to register its devices with that region
// (docs/cloudpods.md). Defaults are Cloudpods' (pkg/cloudcommon/options).
type Cloudpods struct {
	AuthURL             string // auth_url (alias auth_uri)
	AdminUser           string // admin_user
	AdminPassword       string // admin_password (alias admin_passwd)
	AdminDomain         string // admin_domain, default Default
	AdminProject        string // admin_project (alias admin_tenant_name), default system
	AdminProjectDomain  string // admin_project_domain, default Default
	Region              string // region
	SessionEndpointType string // session_endpoint_type, default internal
	// SSLCACerts is ssl_ca_certs (alias ca_file): the CA the region's and
	// keystone's certificates are checked against, beside the system's.
	SSLCACerts string
	// ListenInterface is the host agent's master NIC (listen_interface):
	// the MAC it registers its host record by.
	ListenInterface string
}

// The backends and pipe layouts host.conf may choose (mps_inventory_backend,
// mps_pipe_layout, mps_region_device_model).
const (
	BackendAuto      = "auto"
	BackendInventory = "inventory" // mps-inventory at mps_inventory_url
	BackendRegion    = "region"    // the Cloudpods region of auth_url

	LayoutAuto   = "auto"
	LayoutPerGPU = "per-gpu" // <root>/<uuid>, one control daemon per GPU
	LayoutSingle = "single"  // <root> itself, one control daemon for all GPUs

	DeviceModelAuto     = "auto"
	DeviceModelGPU      = "gpu"       // one GPU row, sharing_mode MPS, virtual_num N
	DeviceModelPerSlice = "per-slice" // one NVIDIA_MPS row per slice (4.0.3)
)

// cloudpodsAliases maps Cloudpods' keys (after - to _) to the field they
// set: structarg's aliases are the second spelling.
var cloudpodsAliases = map[string]string{
	"auth_url": "auth_url", "auth_uri": "auth_url",
	"admin_user":     "admin_user",
	"admin_password": "admin_password", "admin_passwd": "admin_password",
	"admin_domain":  "admin_domain",
	"admin_project": "admin_project", "admin_tenant_name": "admin_project",
	"admin_project_domain":  "admin_project_domain",
	"region":                "region",
	"session_endpoint_type": "session_endpoint_type",
	"ssl_ca_certs":          "ssl_ca_certs", "ca_file": "ssl_ca_certs",
	"listen_interface": "listen_interface",
}

// normalizeKey spells a host.conf key as this package knows it: Cloudpods
// reads `-` and `_` alike (structarg), so `admin-user` is `admin_user`.
func normalizeKey(k string) string { return strings.ReplaceAll(strings.TrimSpace(k), "-", "_") }

// setCloudpods stores one of Cloudpods' keys; handled is false for any
// other key. Cloudpods takes whichever spelling it meets first; here a key
// set twice, under either spelling, must have one value.
func (hc *HostConf) setCloudpods(key string, k, v *yaml.Node) (handled bool, err error) {
	canon, ok := cloudpodsAliases[key]
	if !ok {
		return false, nil
	}
	s, err := scalarValue(v)
	if err != nil {
		return true, err
	}
	s = strings.TrimSpace(s)
	field := hc.Cloudpods.field(canon)
	// Set again, under any spelling and in any order: only the same value
	// is no conflict.
	if first, dup := hc.lines[canon]; dup {
		if *field != s {
			return true, fmt.Errorf("sets %s again with another value (first at line %d)", canon, first)
		}
		return true, nil
	}
	hc.lines[canon] = k.Line
	*field = s
	return true, nil
}

// field is the setting of a canonical Cloudpods key (cloudpodsAliases'
// values).
func (cp *Cloudpods) field(canon string) *string {
	switch canon {
	case "auth_url":
		return &cp.AuthURL
	case "admin_user":
		return &cp.AdminUser
	case "admin_password":
		return &cp.AdminPassword
	case "admin_domain":
		return &cp.AdminDomain
	case "admin_project":
		return &cp.AdminProject
	case "admin_project_domain":
		return &cp.AdminProjectDomain
	case "region":
		return &cp.Region
	case "session_endpoint_type":
		return &cp.SessionEndpointType
	case "ssl_ca_certs":
		return &cp.SSLCACerts
	case "listen_interface":
		return &cp.ListenInterface
	}
	panic("config: no Cloudpods setting " + canon) // cloudpodsAliases and this switch are kept in step by TestEveryCloudpodsKeyIsStored
}

// macAddress reads mps_region_host_mac: a MAC address, in Go's form.
func macAddress(v *yaml.Node) (string, error) {
	s, err := scalarValue(v)
	if err != nil {
		return "", err
	}
	mac, err := net.ParseMAC(strings.TrimSpace(s))
	if err != nil {
		return "", fmt.Errorf("want a MAC address such as 02:00:00:00:00:01, got %s", describe(v))
	}
	return mac.String(), nil
}

// oneOf reads a value that must be one of choices; `_` and `-` alike.
func oneOf(v *yaml.Node, choices ...string) (string, error) {
	s, err := scalarValue(v)
	if err != nil {
		return "", err
	}
	s = strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "_", "-")
	for _, c := range choices {
		if s == c {
			return s, nil
		}
	}
	return "", fmt.Errorf("%s: want one of %s", describe(v), strings.Join(choices, ", "))
}

// Backend is the inventory the daemon registers with: mps_inventory_backend
// when it names one; else the Cloudpods region when host.conf carries
// Cloudpods' auth_url and no mps_inventory_url; else mps-inventory.
func (hc *HostConf) Backend() string {
	switch hc.InventoryBackend {
	case BackendInventory, BackendRegion:
		return hc.InventoryBackend
	}
	if hc.Cloudpods.AuthURL != "" && hc.Line("mps_inventory_url") == 0 {
		return BackendRegion
	}
	return BackendInventory
}

// Layout is the MPS pipe layout: mps_pipe_layout when it names one; else
// single on a Cloudpods host (the region backend), per-gpu otherwise.
func (hc *HostConf) Layout() string {
	switch hc.PipeLayout {
	case LayoutPerGPU, LayoutSingle:
		return hc.PipeLayout
	}
	if hc.Backend() == BackendRegion {
		return LayoutSingle
	}
	return LayoutPerGPU
}

// checkCloudpods checks what the chosen backend needs and applies the
// defaults that depend on it. It runs once every key is read.
func (hc *HostConf) checkCloudpods() []error {
	var errs []error
	at := func(key string) int {
		if l := hc.Line(key); l > 0 {
			return l
		}
		return hc.Line("mps_inventory_backend")
	}
	if hc.Backend() != BackendRegion {
		return nil
	}
	cp := &hc.Cloudpods
	if cp.AuthURL == "" {
		errs = append(errs, errorf(hc.Path, at("auth_url"), "auth_url", "the region backend needs keystone's URL (auth_url)"))
	} else if !restcall.IsHTTPURL(cp.AuthURL) {
		errs = append(errs, errorf(hc.Path, at("auth_url"), "auth_url", "want keystone's http(s)://host:port/v3 URL, got %q", cp.AuthURL))
	}
	if cp.AdminUser == "" {
		errs = append(errs, errorf(hc.Path, at("admin_user"), "admin_user", "the region backend needs the admin user keystone authenticates"))
	}
	if cp.AdminPassword == "" {
		errs = append(errs, errorf(hc.Path, at("admin_password"), "admin_password", "the region backend needs admin_password"))
	}
	switch cp.SessionEndpointType {
	case "", "internal", "public", "apigateway":
	default:
		errs = append(errs, errorf(hc.Path, at("session_endpoint_type"), "session_endpoint_type", "%q: want internal, public or apigateway", cp.SessionEndpointType))
	}
	if hc.Line("mps_thread_percentage") == 0 {
		// Cloudpods' host agent writes 100/N into the rows it shares with
		// us; the same policy keeps either agent from rewriting the other's.
		hc.Threads = EvenThreads
	}
	return errs
}

// CACerts is the content of ssl_ca_certs (nil when unset), read as every
// file host.conf names: never blocking on a FIFO, never past
// MaxConfigBytes (a CA bundle is a few hundred KiB at most). A file with
// no PEM certificate in it is an error here, where check-config and a
// reload see it, not only when the keystone client is built at start.
func (cp Cloudpods) CACerts() ([]byte, error) {
	if cp.SSLCACerts == "" {
		return nil, nil
	}
	data, err := ReadFile(cp.SSLCACerts, MaxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("reading ssl_ca_certs: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("ssl_ca_certs %s holds no PEM certificate", cp.SSLCACerts)
	}
	return data, nil
}

// errNoCloudpods is for callers that need the region's settings.
var errNoCloudpods = errors.New("host.conf has no Cloudpods settings")

// CloudpodsSettings returns the Cloudpods settings, admin_project "system"
// when host.conf names none (Cloudpods' default), or an error when host.conf
// has none. The domains and session_endpoint_type left empty take the
// keystone client's defaults, Cloudpods' own (pkg/keystone).
func (hc *HostConf) CloudpodsSettings() (Cloudpods, error) {
	cp := hc.Cloudpods
	if cp.AuthURL == "" {
		return cp, errNoCloudpods
	}
	if cp.AdminProject == "" {
		cp.AdminProject = "system"
	}
	return cp, nil
}
