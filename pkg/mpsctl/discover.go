package mpsctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"yunion.io/x/mps-daemon/pkg/config"
	"yunion.io/x/mps-daemon/pkg/webtls"
)

// Environment variables mpsctl reads; the names are part of its interface.
const (
	EnvURL      = "MPS_INVENTORY_URL"
	EnvToken    = "MPS_INVENTORY_TOKEN"
	EnvHostConf = "MPS_HOST_CONF"
	EnvCAFile   = "MPS_INVENTORY_CA_FILE"
)

// DefaultURL is the inventory mpsctl talks to when nothing names one: the
// mps-inventory of the local host.
const DefaultURL = "http://127.0.0.1:9330"

// endpointInputs is what the user said on the command line and in the
// environment.
type endpointInputs struct {
	FlagURL, FlagToken string
	// FlagCAFile, FlagCertFile and FlagKeyFile are --ca-file,
	// --cert-file and --key-file.
	FlagCAFile, FlagCertFile, FlagKeyFile string
	// HostConf is the path of host.conf after --host-conf and MPS_HOST_CONF.
	HostConf string
	Env      func(string) string
	// DefaultTokenFile replaces config.DefaultInventoryTokenFile when set
	// (tests cannot write that path); empty in production.
	DefaultTokenFile string
}

// endpoint is the inventory mpsctl will talk to.
type endpoint struct {
	URL   string
	Token string
	// TLS is whom an https:// URL is trusted to be, and the client
	// certificate presented if the inventory asks for one.
	TLS webtls.Client
}

// loadHostConfFunc reads host.conf; config.LoadHostConf in production.
type loadHostConfFunc func(path string) (*config.HostConf, error)

// resolveEndpoint finds the inventory. URL and token are each taken from the
// first of: flag, environment, host.conf, default (DefaultURL, and the
// token in config.DefaultInventoryTokenFile, where a local mps-inventory
// keeps its admin token, when that file exists). The CA file likewise
// (--ca-file, MPS_INVENTORY_CA_FILE, mps_inventory_ca_file; none: the
// system's roots), and the client certificate (--cert-file and
// --key-file, else host.conf's mps_inventory_cert_file and
// mps_inventory_key_file). host.conf is read only when a flag or variable
// leaves something open: the URL, the token, or an https:// URL's CA
// file. A host.conf that is
// missing or not readable (mpsctl run as non-root on a host whose host.conf
// is root-only) is skipped silently, as if absent; one that is readable but
// broken gives a single warning and is otherwise ignored, so a typo in a
// key of the host service does not take mpsctl down. Either way host.conf's
// defaults apply, the default token file included: root on the host of the
// inventory needs no setting at all. A token file that exists but cannot
// be read gives a warning (run as root, or give a token).
func resolveEndpoint(in endpointInputs, load loadHostConfFunc) (ep endpoint, warnings []string) {
	ep.URL = first(in.FlagURL, in.Env(EnvURL))
	ep.Token = first(in.FlagToken, in.Env(EnvToken))
	switch {
	case in.FlagCAFile != "":
		ep.TLS.CAFile, ep.TLS.CASetting = in.FlagCAFile, "--ca-file"
	case in.Env(EnvCAFile) != "":
		ep.TLS.CAFile, ep.TLS.CASetting = in.Env(EnvCAFile), EnvCAFile
	}
	if in.FlagCertFile != "" || in.FlagKeyFile != "" {
		ep.TLS.CertFile, ep.TLS.KeyFile, ep.TLS.CertSetting = in.FlagCertFile, in.FlagKeyFile, "--cert-file"
	}
	if ep.URL != "" && ep.Token != "" && (ep.TLS.CAFile != "" || !strings.HasPrefix(strings.ToLower(ep.URL), "https://")) {
		return ep, nil
	}
	hc, warn := readHostConf(in.HostConf, load)
	if warn != "" {
		warnings = append(warnings, warn)
	}
	if hc == nil {
		hc = config.DefaultHostConf()
	}
	if in.DefaultTokenFile != "" && hc.InventoryTokenFile == config.DefaultInventoryTokenFile && hc.Line("mps_inventory_token_file") == 0 {
		hc.InventoryTokenFile = in.DefaultTokenFile
	}
	if ep.URL == "" {
		ep.URL = hc.InventoryURL
	}
	if ep.TLS.CAFile == "" && hc.InventoryCAFile != "" {
		ep.TLS.CAFile, ep.TLS.CASetting = hc.InventoryCAFile, hostConfKey(hc, "mps_inventory_ca_file")
	}
	if ep.TLS.CertFile == "" && ep.TLS.KeyFile == "" && hc.InventoryCertFile != "" {
		ep.TLS.CertFile, ep.TLS.KeyFile, ep.TLS.CertSetting = hc.InventoryCertFile, hc.InventoryKeyFile, hostConfKey(hc, "mps_inventory_cert_file")
	}
	if ep.Token == "" {
		tok, err := hc.TokenValue()
		if err != nil {
			where := ""
			if hc.Path != "" {
				where = hc.Path + ": "
			}
			warnings = append(warnings, oneLine(fmt.Sprintf("Warning: %sno inventory token: %v", where, err)))
		}
		ep.Token = tok
	}
	if ep.URL == "" {
		ep.URL = DefaultURL
	}
	return ep, warnings
}

// readHostConf loads host.conf, returning nil and no warning when the file is
// absent or unreadable, nil and a warning when it is broken.
func readHostConf(path string, load loadHostConfFunc) (*config.HostConf, string) {
	if path == "" {
		return nil, ""
	}
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil, ""
		}
		return nil, oneLine(fmt.Sprintf("Warning: ignoring %s: %v", path, err))
	}
	f.Close()
	hc, err := load(path)
	if err != nil {
		return nil, oneLine(fmt.Sprintf("Warning: ignoring %s: %v", path, err))
	}
	return hc, ""
}

// hostConfKey names a key of host.conf in messages.
func hostConfKey(hc *config.HostConf, key string) string {
	if hc.Path == "" {
		return key
	}
	return hc.Path + ": " + key
}

func first(vals ...string) string {
	for _, v := range vals {
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	}
	return ""
}

// oneLine folds a possibly multi-line message (config errors are joined with
// newlines) into the single line mpsctl promises on stderr.
func oneLine(s string) string {
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ")
}
